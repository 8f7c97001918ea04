/**
 * A module the soak benchmark preloads into the service (`deno run --preload`, `bench:soak
 * --heap <file>`): every `HEAP_PROBE_SECONDS` (default 5) it prints one line `HEAP {json}` to
 * stdout with the process's `Deno.memoryUsage()` and the size and use of each V8 heap space, so that
 * RSS read from /proc can be split into what V8 holds (young, old, large objects, code) and what
 * lies outside its heap (array buffers, `malloc`, the binary). Its timer is unref'd and it reads
 * nothing of the service.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { getHeapSpaceStatistics } from "node:v8";

const MIB = 1024 * 1024;
const every = Number(Deno.env.get("HEAP_PROBE_SECONDS") ?? "5") * 1000;
const t0 = performance.now();
const round = (bytes: number) => Math.round((bytes / MIB) * 10) / 10;

/** One line: seconds since the probe started, then MiB of each figure. */
function sample(): void {
  const m = Deno.memoryUsage();
  const spaces: Record<string, [number, number]> = {};
  for (const s of getHeapSpaceStatistics()) {
    spaces[s.space_name] = [round(s.space_size), round(s.space_used_size)];
  }
  const line = {
    t: Math.round((performance.now() - t0) / 100) / 10,
    rss: round(m.rss),
    heapTotal: round(m.heapTotal),
    heapUsed: round(m.heapUsed),
    external: round(m.external),
    spaces,
  };
  console.log(`HEAP ${JSON.stringify(line)}`);
}

const timer = setInterval(sample, every);
Deno.unrefTimer(timer);
