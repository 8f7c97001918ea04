/**
 * The Worker beside the Deno service (`deno task bench:worker`), in one run: CPU time per request
 * on workerd and in Deno, paired (rounds alternate, same load: `wrk -t1 -c8` for `--duration`
 * seconds of JSON 200 from 500 warm callers in turn, `worker.lua`); one caller hammering the Worker
 * at the default limit (60 per 60 s) on 64 connections for 10 s, twice per store, alternating
 * (`hammer.lua`: the refusals' CPU per request, what the hammer was admitted, and another caller's
 * 100 requests beside it and after it); the bundle sizes, and workerd's cold start.
 *
 * - CPU: the server process's user + system time (`/proc/<pid>/stat`) over a round, divided by the
 *   requests wrk completed; for the Worker, workerd's process only (miniflare's Node side, which
 *   starts it, serves no request). Three servers: Deno (`deno task start`, memory store), the
 *   Worker with its Durable Object (the shipped default), the Worker with `RATE_LIMIT_STORE=memory`
 *   (the same store as Deno: the runtimes compared). The limit is 10,000 per 60 s (the Durable
 *   Object store's largest), so no request is refused; the window is the default's, so that each
 *   object's idle sweep (its alarm, one window after its first hit) runs as it would in service,
 *   not every second.
 * - Bundle: `dist/worker/worker.js` and its gzip size; Deno's `dist/app/` (`deno task build`).
 * - Cold start: workerd started with a fresh Durable Object storage, to `ready`; then its first
 *   response (the isolate evaluates the bundle, configures, builds the path, creates the object),
 *   and the next one.
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
/** The callers of the admitted load (`worker.lua`), all warm after the first round. */
const CALLERS = 500;
/**
 * The load's callers, none near its limit; Deno reads them behind a trusted proxy. A limit of 1,000
 * per 60 s: the memory store's cap on Workers at that limit (2,500 callers) holds them all.
 */
const LOAD = {
  PUBLIC_BASE_URL: "http://127.0.0.1",
  RATE_LIMIT: "1000",
  RATE_LIMIT_WINDOW_SECONDS: "60",
  ACCESS_LOG: "false",
  TRUSTED_PROXIES: "127.0.0.1",
};
const CLOCK_TICKS = 100;
/** The hammer's servers: the default limit, so that it is refused after its first 60. */
const LIMITED = {
  PUBLIC_BASE_URL: "http://127.0.0.1",
  RATE_LIMIT: "60",
  RATE_LIMIT_WINDOW_SECONDS: "60",
  ACCESS_LOG: "false",
};
const HAMMER_CONNECTIONS = 64;
const HAMMER_SECONDS = 10;
/** Runs of the hammer per store (the lower CPU per request of them is compared). */
const HAMMER_RUNS = 2;

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
    args: [
      "-t1",
      "-c8",
      `-d${DURATION}s`,
      "-s",
      `${ROOT}/tests/bench/worker.lua`,
      url,
      "--",
      String(CALLERS),
    ],
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

/** A server on workerd: its URL, its workerd process, and how to stop it. */
interface Workerd {
  url: URL;
  pid: number;
  close: () => Promise<void>;
}

/**
 * The Worker on workerd with `bindings` (its Durable Object storage in memory), or, given the
 * Platform's JSON as a string, the bare Worker that only sends it; with its workerd's pid.
 */
async function startWorkerd(
  bindings: Record<string, string> | string,
  root = ROOT,
): Promise<Workerd> {
  const before = new Set(await workerdPids());
  const served = typeof bindings === "string"
    ? await startBareWorker(bindings)
    : await serveWorker({ root, port: 0, persist: false, bindings });
  const pid = (await workerdPids()).find((pid) => !before.has(pid));
  if (pid === undefined) throw new Error("no new workerd process");
  return { url: served.url, pid, close: () => served.close() };
}

/** What one run of the hammer measured. */
interface Hammered {
  /** workerd's CPU per request over the run (the hammer's requests and the caller's beside it). */
  cpuUs: number;
  /** Requests answered during the run. */
  requests: number;
  /** The hammer's admitted requests (its caller's first ones until the server refused it). */
  admitted: number;
  /** Admitted of another caller's 100 requests sent while the hammer was refused. */
  beside: number;
  /** Admitted of a third caller's 100 requests sent after the hammer. */
  after: number;
}

/** `GET url` as caller `ip`; its status. */
async function statusOf(url: URL, ip: string): Promise<number> {
  const response = await fetch(url, { headers: { "cf-connecting-ip": ip } });
  await response.body?.cancel();
  return response.status;
}

/** Admitted of `count` requests of caller `ip`, one after another. */
async function admittedOf(url: URL, ip: string, count: number): Promise<number> {
  let admitted = 0;
  for (let i = 0; i < count; i++) if (await statusOf(url, ip) === 200) admitted++;
  return admitted;
}

/**
 * One caller (fresh: `run` names it) hammering `server` for `HAMMER_SECONDS`; once it is refused,
 * another caller's 100 requests beside it; a third's 100 after it (outside the CPU measured).
 */
async function hammer(server: Workerd, url: URL, run: number): Promise<Hammered> {
  const ip = (n: number) => `198.18.${run}.${n}`;
  const before = await cpuSeconds(server.pid);
  const wrk = new Deno.Command("wrk", {
    args: [
      "-t1",
      `-c${HAMMER_CONNECTIONS}`,
      `-d${HAMMER_SECONDS}s`,
      "-s",
      `${ROOT}/tests/bench/hammer.lua`,
      url.href,
      "--",
      ip(1),
    ],
    stdout: "piped",
  }).output();
  // Beside it once it is refused: the hammer's caller asked until it is (those requests counted).
  let probes = 0;
  let probesAdmitted = 0;
  for (let status = 0; status !== 429; probes++) {
    status = await statusOf(url, ip(1));
    if (status === 200) probesAdmitted++;
  }
  const beside = await admittedOf(url, ip(2), 100);
  const text = new TextDecoder().decode((await wrk).stdout);
  const cpu = (await cpuSeconds(server.pid)) - before;
  const counts = /hammer admitted=(\d+) refused=(\d+) other=(\d+)/.exec(text);
  const requests = /(\d+) requests in/.exec(text)?.[1];
  if (counts === null || requests === undefined || counts[3] !== "0") {
    throw new Error(`wrk: ${text}`);
  }
  const answered = Number(requests) + probes + 100;
  return {
    cpuUs: cpu / answered * 1e6,
    requests: answered,
    admitted: Number(counts[1]) + probesAdmitted,
    beside,
    after: await admittedOf(url, ip(3), 100),
  };
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
const workerDo = await startWorkerd(LOAD);
const workerMemory = await startWorkerd({ ...LOAD, RATE_LIMIT_STORE: "memory" });
const path = "/api/v1/platform";
const platformJson = await (await fetch(new URL(path, workerMemory.url))).text();
const bare = await startWorkerd(platformJson);
const hammeredDo = await startWorkerd(LIMITED);
const hammeredMemory = await startWorkerd({ ...LIMITED, RATE_LIMIT_STORE: "memory" });
const against = AGAINST === undefined ? undefined : await startWorkerd(LOAD, AGAINST);
const cpu = {
  deno: [] as number[],
  workerDo: [] as number[],
  workerMemory: [] as number[],
  bare: [] as number[],
  against: [] as number[],
};
const hammers = { workerDo: [] as Hammered[], workerMemory: [] as Hammered[] };
try {
  for (let round = 0; round < ROUNDS; round++) {
    cpu.deno.push(await cpuPerRequest(deno.pid, deno.url));
    if (against !== undefined) {
      cpu.against.push(await cpuPerRequest(against.pid, new URL(path, against.url).href));
    }
    cpu.workerDo.push(await cpuPerRequest(workerDo.pid, new URL(path, workerDo.url).href));
    cpu.workerMemory.push(
      await cpuPerRequest(workerMemory.pid, new URL(path, workerMemory.url).href),
    );
    cpu.bare.push(await cpuPerRequest(bare.pid, new URL(path, bare.url).href));
  }
  for (let run = 0; run < HAMMER_RUNS; run++) {
    hammers.workerDo.push(await hammer(hammeredDo, new URL(path, hammeredDo.url), 2 * run));
    hammers.workerMemory.push(
      await hammer(hammeredMemory, new URL(path, hammeredMemory.url), 2 * run + 1),
    );
  }
} finally {
  for (const server of [bare, workerDo, workerMemory, hammeredDo, hammeredMemory]) {
    await server.close();
  }
  await against?.close();
  await deno.stop();
}
const cold = await coldStart();
const denoBundle = await folderBytes(`${ROOT}/dist/app`);
report();

/** Prints the run as a Markdown table. */
function report(): void {
  const us = (values: number[]) =>
    `${median(values).toFixed(0)} µs [${Math.min(...values).toFixed(0)}–${
      Math.max(...values).toFixed(0)
    }]`;
  const ratio = (values: number[]) => (median(values) / median(cpu.deno)).toFixed(2);
  const kib = (bytes: number) => `${(bytes / 1024).toFixed(0)} KiB`;
  const row = (measure: string, value: string) => console.log(`| ${measure} | ${value} |`);
  console.log(`| measure | value |\n|---|---|`);
  row("CPU per JSON 200, Deno (deno task start, memory store)", us(cpu.deno));
  row(
    `CPU per JSON 200, workerd, Durable Object store, ${CALLERS} warm callers admitted`,
    `${us(cpu.workerDo)} (${ratio(cpu.workerDo)} of Deno; ${
      (median(cpu.workerDo) / median(cpu.workerMemory)).toFixed(2)
    } of the memory store)`,
  );
  row(
    `CPU per JSON 200, workerd, memory store, ${CALLERS} warm callers admitted`,
    `${us(cpu.workerMemory)} (${ratio(cpu.workerMemory)} of Deno)`,
  );
  row(
    "CPU per request, workerd, a Worker sending the same bytes only",
    `${us(cpu.bare)} (${ratio(cpu.bare)} of Deno)`,
  );
  if (cpu.against.length > 0) {
    row(
      `CPU per JSON 200, workerd, Durable Object store of ${AGAINST}`,
      `${us(cpu.against)} (this checkout's ÷ it: ${
        (median(cpu.workerDo) / median(cpu.against)).toFixed(2)
      })`,
    );
  }
  const lower = (runs: Hammered[]) => Math.min(...runs.map((h) => h.cpuUs));
  for (
    const [name, runs] of [["Durable Object", hammers.workerDo], [
      "memory",
      hammers.workerMemory,
    ]] as const
  ) {
    row(
      `one caller hammering (${HAMMER_CONNECTIONS} connections, ${HAMMER_SECONDS} s, limit 60), workerd, ${name} store: CPU per request`,
      runs.map((h) => `${h.cpuUs.toFixed(0)} µs (${h.requests} requests)`).join(", "),
    );
    row(
      `... admitted of the hammer; another caller's 100 beside it; after it`,
      runs.map((h) => `${h.admitted}; ${h.beside}; ${h.after}`).join(" / "),
    );
  }
  row(
    "hammer's CPU per request, Durable Object ÷ memory store (the lower of the runs each)",
    (lower(hammers.workerDo) / lower(hammers.workerMemory)).toFixed(2),
  );
  row(
    "Worker bundle (dist/worker/worker.js)",
    `${kib(built.bytes)}, ${kib(built.gzipBytes)} gzipped`,
  );
  row("Deno bundle (dist/app/)", `${kib(denoBundle.bytes)}, ${kib(denoBundle.gzipBytes)} gzipped`);
  row("workerd start to ready (miniflare)", `${cold.readyMs.toFixed(0)} ms`);
  row("first response (isolate, configuration, object)", `${cold.firstMs.toFixed(1)} ms`);
  row("second response", `${cold.secondMs.toFixed(1)} ms`);
}
