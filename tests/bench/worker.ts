/**
 * The Worker beside the Deno service (`deno task bench:worker`), in one run: CPU time per request
 * on workerd and in Deno, paired (rounds alternate, same load: `wrk -t1 -c8` for `--duration`
 * seconds of JSON 200 from 1,000 callers in turn, `worker.lua`), the bundle sizes, and workerd's
 * cold start.
 *
 * - CPU: the server process's user + system time (`/proc/<pid>/stat`) over a round, divided by the
 *   requests wrk completed; for the Worker, workerd's process only (miniflare's Node side, which
 *   starts it, serves no request). Three servers: Deno (`deno task start`, memory store), the
 *   Worker with its Durable Object (the shipped default), the Worker with `RATE_LIMIT_STORE=memory`
 *   (the same store as Deno: the runtimes compared). The limit is 1,000 per second, so no request
 *   is refused.
 * - Bundle: `dist/worker/worker.js` and its gzip size; Deno's `dist/app/` (`deno task build`).
 * - Cold start: workerd started with a fresh Durable Object storage, to `ready`; then its first
 *   response (the isolate evaluates the bundle, configures, builds the path, creates the object),
 *   and the next one.
 *
 * `--against <folder>`: another checkout, its Worker built (`deno task worker:build`), served beside
 * this one with its Durable Object in the same rounds (a before/after ratio of a change).
 *
 * Prints a Markdown table. Bounded: `--rounds` (at most 10) x `--duration` (at most 10 s) per server.
 *
 * @module
 */
// deno-lint-ignore-file no-console -- a benchmark's report

import { parseArgs } from "node:util";
import { Miniflare } from "npm:miniflare@4.20260730.0";
import { compressBytes } from "../../lib/http/representation.ts";
import { buildWorker } from "../../lib/build/worker.ts";
import { serveWorker } from "../../lib/build/worker_dev.ts";
import { ROOT } from "../_deno_info.ts";
import { freePort } from "./_proc.ts";
import { startTaskArgs } from "./_start_task.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    rounds: { type: "string", default: "3" },
    duration: { type: "string", default: "3" },
    against: { type: "string" },
  },
});
/**
 * Another checkout whose Worker is built (`deno task worker:build`): its Durable Object Worker runs
 * beside this one's, in the same rounds, for a before/after ratio.
 */
const AGAINST = values.against;
const ROUNDS = Math.min(10, Math.max(1, Number(values.rounds)));
const DURATION = Math.min(10, Math.max(1, Number(values.duration)));
/**
 * 1,000 callers (`worker.lua`), none near its limit; Deno reads them behind a trusted proxy. A limit
 * of 1,000 a second: the memory store's cap on Workers at that limit (2,500 callers) holds them all.
 */
const LOAD = {
  PUBLIC_BASE_URL: "http://127.0.0.1",
  RATE_LIMIT: "1000",
  RATE_LIMIT_WINDOW_SECONDS: "1",
  ACCESS_LOG: "false",
  TRUSTED_PROXIES: "127.0.0.1",
};
const CLOCK_TICKS = 100;

/** The standard output of `command` (through it: Deno asks for --allow-all to read /proc itself). */
async function output(command: string, ...args: string[]): Promise<string> {
  const out = await new Deno.Command(command, { args, stdout: "piped" }).output();
  return new TextDecoder().decode(out.stdout);
}

/** User + system CPU seconds of `pid` so far. */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await output("cat", `/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

/** The workerd processes among this process's children, oldest first. */
async function workerdPids(): Promise<number[]> {
  const text = await output("pgrep", "-P", String(Deno.pid), "workerd");
  return text.split("\n").filter((line) => line !== "").map(Number).sort((a, b) => a - b);
}

/** Requests wrk completed in `DURATION` seconds against `url`. */
async function wrk(url: string): Promise<number> {
  const out = await new Deno.Command("wrk", {
    args: ["-t1", "-c8", `-d${DURATION}s`, "-s", `${ROOT}/tests/bench/worker.lua`, url],
    stdout: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const requests = /(\d+) requests in/.exec(text)?.[1];
  if (requests === undefined || / Non-2xx/.test(text)) throw new Error(`wrk: ${text}`);
  return Number(requests);
}

/** CPU microseconds per request of the server `pid` at `url`, over one round. */
async function cpuPerRequest(pid: number, url: string): Promise<number> {
  const before = await cpuSeconds(pid);
  const requests = await wrk(url);
  return ((await cpuSeconds(pid)) - before) / requests * 1e6;
}

/** The Deno service as `deno task start` runs it; its pid and URL. */
async function startDeno(): Promise<{ pid: number; url: string; stop: () => Promise<void> }> {
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: startTaskArgs(),
    cwd: ROOT,
    env: { ...LOAD, PORT: String(port), HOSTNAME: "127.0.0.1" },
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const url = `http://127.0.0.1:${port}/api/v1/platform`;
  for (let i = 0; i < 100; i++) {
    const ok = await fetch(url).then((r) => r.body?.cancel().then(() => true), () => false);
    if (ok) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    pid: child.pid,
    url,
    stop: async () => {
      child.kill("SIGTERM");
      await child.stderr.cancel();
      await child.status;
    },
  };
}

/** The median of `values`. */
function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** workerd's cold start: to ready, the first response, the second. */
async function coldStart(): Promise<{ readyMs: number; firstMs: number; secondMs: number }> {
  const storage = await Deno.makeTempDir({ prefix: "bench-worker-" });
  try {
    const started = performance.now();
    const served = await serveWorker({ root: ROOT, port: 0, persist: storage, bindings: LOAD });
    const readyMs = performance.now() - started;
    const timed = async () => {
      const t0 = performance.now();
      const response = await fetch(new URL("/api/v1/platform", served.url));
      await response.arrayBuffer();
      if (response.status !== 200) throw new Error(`status ${response.status}`);
      return performance.now() - t0;
    };
    const firstMs = await timed();
    const secondMs = await timed();
    await served.close();
    return { readyMs, firstMs, secondMs };
  } finally {
    await Deno.remove(storage, { recursive: true });
  }
}

/** The size of every file under `dir`, in bytes, and gzip-compressed. */
async function folderBytes(dir: string): Promise<{ bytes: number; gzipBytes: number }> {
  let bytes = 0;
  let gzipBytes = 0;
  for await (const entry of Deno.readDir(dir)) {
    if (!entry.isFile) continue;
    const data = await Deno.readFile(`${dir}/${entry.name}`);
    bytes += data.length;
    gzipBytes += (await compressBytes(data, "gzip")).length;
  }
  return { bytes, gzipBytes };
}

/**
 * The reference on workerd: a Worker that answers every request with the Platform's JSON bytes and
 * nothing else, through the same miniflare and workerd: what serving alone costs there.
 */
async function startBareWorker(body: string): Promise<{ url: URL; close: () => Promise<void> }> {
  const miniflare = new Miniflare({
    name: "bare",
    modules: true,
    script: `const body = ${JSON.stringify(body)};
export default { fetch() { return new Response(body, { headers: { "content-type": "application/json" } }); } };`,
    compatibilityDate: "2026-08-01",
    host: "127.0.0.1",
    port: 0,
  });
  return { url: await miniflare.ready, close: () => miniflare.dispose() };
}

const built = await buildWorker(ROOT);
const deno = await startDeno();
const workerDo = await serveWorker({ root: ROOT, port: 0, persist: false, bindings: LOAD });
const [doPid] = await workerdPids();
const workerMemory = await serveWorker({
  root: ROOT,
  port: 0,
  persist: false,
  bindings: { ...LOAD, RATE_LIMIT_STORE: "memory" },
});
const memoryPid = (await workerdPids()).find((pid) => pid !== doPid)!;
const path = "/api/v1/platform";
const platformJson = await (await fetch(new URL(path, workerMemory.url))).text();
const bare = await startBareWorker(platformJson);
const barePid = (await workerdPids()).find((pid) => pid !== doPid && pid !== memoryPid)!;
const against = AGAINST === undefined
  ? undefined
  : await serveWorker({ root: AGAINST, port: 0, persist: false, bindings: LOAD });
const againstPid = (await workerdPids()).find((pid) => ![doPid, memoryPid, barePid].includes(pid));
const cpu = {
  deno: [] as number[],
  workerDo: [] as number[],
  against: [] as number[],
  workerMemory: [] as number[],
  bare: [] as number[],
};
try {
  for (let round = 0; round < ROUNDS; round++) {
    cpu.deno.push(await cpuPerRequest(deno.pid, deno.url));
    if (against !== undefined) {
      cpu.against.push(await cpuPerRequest(againstPid!, new URL(path, against.url).href));
    }
    cpu.workerDo.push(await cpuPerRequest(doPid!, new URL(path, workerDo.url).href));
    cpu.workerMemory.push(await cpuPerRequest(memoryPid, new URL(path, workerMemory.url).href));
    cpu.bare.push(await cpuPerRequest(barePid, new URL(path, bare.url).href));
  }
} finally {
  await bare.close();
  await against?.close();
  await deno.stop();
  await workerDo.close();
  await workerMemory.close();
}
const cold = await coldStart();
const denoBundle = await folderBytes(`${ROOT}/dist/app`);
const us = (values: number[]) =>
  `${median(values).toFixed(0)} µs [${Math.min(...values).toFixed(0)}–${
    Math.max(...values).toFixed(0)
  }]`;
const ratio = (values: number[]) => (median(values) / median(cpu.deno)).toFixed(2);
const kib = (bytes: number) => `${(bytes / 1024).toFixed(0)} KiB`;
console.log(`| measure | value |\n|---|---|`);
console.log(`| CPU per JSON 200, Deno (deno task start, memory store) | ${us(cpu.deno)} |`);
console.log(
  `| CPU per JSON 200, workerd, Durable Object store | ${us(cpu.workerDo)} (${
    ratio(cpu.workerDo)
  } of Deno) |`,
);
if (AGAINST !== undefined) {
  console.log(
    `| CPU per JSON 200, workerd, Durable Object store, --against checkout | ${us(cpu.against)} (${
      ratio(cpu.against)
    } of Deno; this checkout ${(median(cpu.workerDo) / median(cpu.against)).toFixed(2)} of it) |`,
  );
}
console.log(
  `| CPU per JSON 200, workerd, memory store | ${us(cpu.workerMemory)} (${
    ratio(cpu.workerMemory)
  } of Deno) |`,
);
console.log(
  `| CPU per request, workerd, a Worker sending the same bytes only | ${us(cpu.bare)} (${
    ratio(cpu.bare)
  } of Deno) |`,
);
console.log(
  `| Worker bundle (dist/worker/worker.js) | ${kib(built.bytes)}, ${
    kib(built.gzipBytes)
  } gzipped |`,
);
console.log(
  `| Deno bundle (dist/app/) | ${kib(denoBundle.bytes)}, ${kib(denoBundle.gzipBytes)} gzipped |`,
);
console.log(`| workerd start to ready (miniflare) | ${cold.readyMs.toFixed(0)} ms |`);
console.log(`| first response (isolate, configuration, object) | ${cold.firstMs.toFixed(1)} ms |`);
console.log(`| second response | ${cold.secondMs.toFixed(1)} ms |`);
