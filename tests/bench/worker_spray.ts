/**
 * The memory store in a Worker isolate (`RATE_LIMIT_STORE=memory` on workerd), sprayed: workerd's
 * resident memory (`/proc/<pid>/status`) with the Worker warmed, after one request each from as
 * many callers as the store's cap on Workers (`lib/workers/memory_cap.ts`), and after a smaller
 * set of callers each using its whole limit of 60 (the costliest log), so that the cap's worst case
 * can be set against an isolate's 128 MB (lib/limit/README.md, "Durable Objects on Workers").
 *
 * Run: `deno task bench:worker-spray` (about a minute). Bounded: `--callers` at most the cap,
 * `--full` callers x 60 requests, 16 at a time, to 127.0.0.1 only.
 *
 * @module
 */
// deno-lint-ignore-file no-console -- a benchmark's report

import { parseArgs } from "node:util";
import { buildWorker } from "../../lib/build/worker.ts";
import { serveWorker } from "../../lib/build/worker_dev.ts";
import { workersMaxCallers } from "../../lib/workers/memory_cap.ts";
import { ROOT } from "../_deno_info.ts";
import { status } from "./_proc.ts";

const CAP = workersMaxCallers(60);
const { values } = parseArgs({
  args: Deno.args,
  options: { callers: { type: "string", default: String(CAP) }, full: { type: "string" } },
});
const CALLERS = Math.min(CAP, Math.max(1, Number(values.callers)));
const FULL = Math.min(5_000, Math.max(1, Number(values.full ?? "2000")));
const CONCURRENCY = 16;

/** The workerd process among this process's children. */
async function workerdPid(): Promise<number> {
  const out = await new Deno.Command("pgrep", { args: ["-P", String(Deno.pid), "workerd"] })
    .output();
  return Number(new TextDecoder().decode(out.stdout).trim().split("\n")[0]);
}

/** The IPv4 address of caller `n` (10.0.0.0/8: distinct callers, one key each). */
function addressOf(n: number): string {
  return `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
}

/** Sends `count` requests, request `i` from caller `callerOf(i)`, `CONCURRENCY` at a time. */
async function spray(url: URL, count: number, callerOf: (i: number) => number): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < count) {
      const i = next++;
      const response = await fetch(url, {
        headers: { "cf-connecting-ip": addressOf(callerOf(i)) },
      });
      await response.arrayBuffer();
      if (response.status !== 200) throw new Error(`request ${i}: ${response.status}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, lane));
}

const MIB = 1024 * 1024;
await buildWorker(ROOT);
const served = await serveWorker({
  root: ROOT,
  port: 0,
  persist: false,
  bindings: {
    PUBLIC_BASE_URL: "http://127.0.0.1",
    RATE_LIMIT_STORE: "memory",
    ACCESS_LOG: "false",
  },
});
try {
  const pid = await workerdPid();
  const platform = new URL("/api/v1/platform", served.url);
  for (const path of ["/api/v1/platform", "/", "/llms.txt", "/openapi.json", "/developers"]) {
    await (await fetch(new URL(path, served.url))).arrayBuffer();
  }
  const warm = await status(pid);
  await spray(platform, CALLERS, (i) => i);
  const sprayed = await status(pid);
  // Callers past the sprayed ones, each sending 60 requests in turn: a full log each.
  await spray(platform, FULL * 60, (i) => CALLERS + Math.floor(i / 60));
  const full = await status(pid);
  // `status` reads MiB.
  const perFull = (full.rss - sprayed.rss) * MIB / FULL;
  const mib = (value: number) => `${value.toFixed(1)} MiB`;
  console.log(`| workerd, memory store, limit 60, cap ${CAP} | resident |\n|---|---|`);
  console.log(`| warmed (every path built) | ${mib(warm.rss)} |`);
  console.log(`| after ${CALLERS} callers, one request each | ${mib(sprayed.rss)} |`);
  console.log(`| after ${FULL} more callers, 60 requests each | ${mib(full.rss)} |`);
  console.log(`| per caller with a full log (difference / ${FULL}) | ${perFull.toFixed(0)} B |`);
  console.log(
    `| the cap at full logs, from warmed (projected) | ${mib(warm.rss + CAP * perFull / MIB)} |`,
  );
  console.log(`| peak (VmHWM) | ${mib(full.hwm)} |`);
} finally {
  await served.close();
}
