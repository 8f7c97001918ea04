/**
 * The soak benchmark: the memory an operator must plan for under sustained load. The service runs as
 * `deno task start` runs it (pinned to CPU 0, trusted-proxy mode, access log off) while `wrk` on CPU
 * 1 sends, at full speed, requests from many callers that each come back several times per window
 * (262,144 by default: about a dozen requests each per 60 s window at the service's rate) plus a
 * few hot callers that are over the limit and refused. Then the load stops and the service idles
 * until every caller has left the window and been swept.
 *
 * The resident memory of the service (VmRSS from /proc) is sampled every few seconds, and its peak
 * (VmHWM) read at the end of the load and of the idle time. The report gives one row per segment
 * (one wrk run each, a minute by default: requests per second, p50 and p99, the RSS range), then
 * steady RSS (the samples once the first window has filled), peak RSS, and RSS after idling.
 *
 * Usage: `deno task bench:soak [--minutes 3] [--callers 262144] [--window 60] [--limit 60]
 * [--hot 50] [--hot-every 50] [--cap 500000] [--idle <seconds>] [--sample 5] [--segment 60]
 * [--trace-gc <file>] [--heap <seconds>] [--smaps <file>] [--json <file>]`. `--trace-gc` writes V8's
 * line per collection to the file; `--heap` adds to it, every so many seconds, the service's V8 heap
 * spaces and `Deno.memoryUsage()` (tests/bench/_heap_probe.ts, preloaded). `--smaps` copies the service's
 * `/proc/<pid>/smaps` at the end of the idle time (which mappings hold what is left). `--window` sets `RATE_LIMIT_WINDOW_SECONDS` (a shorter one
 * keeps a run short; the figures in tests/bench/README.md are for the default 60 s); the idle time
 * defaults to one and a half windows plus 5 s (a caller is swept at most half a window after it
 * expires). Only 127.0.0.1 is targeted; every wrk run is bounded by its duration.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { parseArgs } from "node:util";
import { startTaskArgs } from "./_start_task.ts";
import { freePort, status } from "./_proc.ts";

const { values: args } = parseArgs({
  args: Deno.args[0] === "--" ? Deno.args.slice(1) : Deno.args,
  options: {
    minutes: { type: "string", default: "3" },
    callers: { type: "string", default: "262144" },
    window: { type: "string", default: "60" },
    limit: { type: "string", default: "60" },
    hot: { type: "string", default: "50" },
    "hot-every": { type: "string", default: "50" },
    cap: { type: "string", default: "500000" },
    idle: { type: "string" },
    sample: { type: "string", default: "5" },
    segment: { type: "string", default: "60" },
    connections: { type: "string", default: "50" },
    "trace-gc": { type: "string" },
    heap: { type: "string" },
    smaps: { type: "string" },
    json: { type: "string" },
  },
});
const minutes = Number(args.minutes);
const callers = Number(args.callers);
const windowSeconds = Number(args.window);
const segmentSeconds = Number(args.segment);
const sampleSeconds = Number(args.sample);
const idleSeconds = args.idle === undefined ? windowSeconds * 1.5 + 5 : Number(args.idle);
if (!(minutes > 0 && minutes <= 8 && idleSeconds >= 0 && idleSeconds <= 200)) {
  throw new Error("--minutes must be at most 8 and --idle at most 200 (seconds)");
}
if (args.heap !== undefined && args["trace-gc"] === undefined) {
  throw new Error("--heap writes into the --trace-gc file: give both");
}
if (!(callers >= 2 && callers <= 4_194_304 && segmentSeconds >= 5 && sampleSeconds >= 1)) {
  throw new Error("--callers must be 2..4,194,304, --segment at least 5 and --sample at least 1");
}
const THREADS = 2;
const here = import.meta.dirname!;

/** One sample: seconds since the load started, VmRSS and VmHWM in MiB. */
type Sample = [number, number, number];

/** One wrk run (one row of the report). */
interface Segment {
  seconds: number;
  requests: number;
  non2xx: number;
  errors: number;
  p50: number;
  p99: number;
  rssMin: number;
  rssMax: number;
}

/** The service as `deno task start` runs it, `--trace-gc` and the heap probe added if asked for. */
function startService(port: number): Deno.ChildProcess {
  const argv = startTaskArgs();
  const trace = args["trace-gc"];
  if (trace !== undefined) {
    const at = argv.findIndex((word) => word.startsWith("--v8-flags="));
    argv[at] = `${argv[at]},--trace-gc`;
    if (args.heap !== undefined) argv.splice(at, 0, `--preload=${here}/_heap_probe.ts`);
  }
  return new Deno.Command("taskset", {
    args: ["-c", "0", Deno.execPath(), ...argv],
    cwd: `${here}/../..`,
    env: {
      HOSTNAME: "127.0.0.1",
      PORT: String(port),
      TRUSTED_PROXIES: "127.0.0.1",
      ACCESS_LOG: "false",
      PUBLIC_BASE_URL: "http://localhost:8000",
      RATE_LIMIT: args.limit,
      RATE_LIMIT_WINDOW_SECONDS: args.window,
      RATE_LIMIT_MAX_CALLERS: args.cap,
      ...(args.heap === undefined ? {} : { HEAP_PROBE_SECONDS: args.heap }),
    },
    stdout: trace === undefined ? "null" : "piped",
    stderr: "inherit",
  }).spawn();
}

async function waitFor(url: string): Promise<void> {
  for (let i = 0;; i++) {
    try {
      await (await fetch(url)).body?.cancel();
      return;
    } catch (error) {
      if (i > 100) throw error;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** One wrk run of `seconds`, starting each thread `offset` requests into its share. */
async function wrk(port: number, seconds: number, offset: number) {
  const out = await new Deno.Command("taskset", {
    args: [
      ...["-c", "1", "wrk", `-t${THREADS}`, `-c${args.connections}`, `-d${seconds}s`],
      ...["--timeout", "2s", "-s", `${here}/soak.lua`, `http://127.0.0.1:${port}`, "--"],
      ...[String(callers), String(THREADS), String(offset), args.hot, args["hot-every"]],
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const line = text.split("\n").find((l) => l.startsWith("WRKJSON "));
  if (!line) throw new Error(`wrk failed: ${text}${new TextDecoder().decode(out.stderr)}`);
  return JSON.parse(line.slice(8));
}

/**
 * Samples RSS and VmHWM every `sampleSeconds` into `samples` (seconds since `t0`, MiB, MiB) until
 * stopped: where VmHWM rises between two samples is when the peak happened, even if it lasted less
 * than a sample's interval.
 */
function sampler(pid: number, t0: number, samples: Sample[]): () => Promise<void> {
  let stop = false;
  const loop = (async () => {
    while (!stop) {
      const { rss, hwm } = await status(pid);
      samples.push([(performance.now() - t0) / 1000, rss, hwm]);
      await new Promise((r) => setTimeout(r, sampleSeconds * 1000));
    }
  })();
  return async () => {
    stop = true;
    await loop;
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

async function soak() {
  const port = freePort();
  const service = startService(port);
  const traceDone = args["trace-gc"] === undefined ? Promise.resolve() : service.stdout.pipeTo(
    (await Deno.open(args["trace-gc"], { write: true, create: true, truncate: true })).writable,
  );
  try {
    await waitFor(`http://127.0.0.1:${port}/llms.txt`);
    const started = await status(service.pid);
    const t0 = performance.now();
    const samples: Sample[] = [];
    const stopSampling = sampler(service.pid, t0, samples);
    const segments: Segment[] = [];
    let sentPerThread = 0;
    for (let left = minutes * 60; left > 0; left -= segmentSeconds) {
      const seconds = Math.min(segmentSeconds, left);
      const from = (performance.now() - t0) / 1000;
      const r = await wrk(port, seconds, sentPerThread);
      const to = (performance.now() - t0) / 1000;
      sentPerThread += Math.floor(r.requests / THREADS);
      const inside = samples.filter(([t]) => t >= from && t <= to).map(([, rss]) => rss);
      segments.push({
        seconds: r.duration_us / 1e6,
        requests: r.requests,
        non2xx: r.non2xx3xx,
        errors: r.connect + r.read + r.write + r.timeout,
        p50: r.p50_us / 1000,
        p99: r.p99_us / 1000,
        rssMin: Math.min(...inside),
        rssMax: Math.max(...inside),
      });
      console.error(JSON.stringify(segments.at(-1)));
    }
    const loadEnd = (performance.now() - t0) / 1000;
    const atLoadEnd = await status(service.pid);
    await new Promise((r) => setTimeout(r, idleSeconds * 1000));
    await stopSampling();
    const idle = await status(service.pid);
    if (args.smaps !== undefined) {
      const out = await new Deno.Command("cat", {
        args: [`/proc/${service.pid}/smaps`],
        stdout: "piped",
      }).output();
      await Deno.writeFile(args.smaps, out.stdout);
    }
    const steady = samples.filter(([t]) => t >= windowSeconds && t <= loadEnd).map(([, r]) => r);
    return { started, segments, samples, steady, atLoadEnd, idle, loadEnd };
  } finally {
    service.kill("SIGTERM");
    await service.status;
    await traceDone;
  }
}

console.log(
  `soak: ${callers.toLocaleString("en")} callers + ${args.hot} hot (1 request in ${
    args["hot-every"]
  }), limit ${args.limit} per ${windowSeconds} s, cap ${args.cap}, ${minutes} min of load then ${idleSeconds} s idle; service on cpu 0, wrk -t${THREADS} -c${args.connections} on cpu 1`,
);
const result = await soak();
const f = (x: number) => x.toFixed(0);
const rows = [
  "| segment | req/s | refused (429) | errors | p50 ms | p99 ms | RSS MiB (min-max of samples) |",
  "|---|---|---|---|---|---|---|",
  ...result.segments.map((s, i) =>
    `| ${i + 1} | ${f(s.requests / s.seconds)} | ${s.non2xx} | ${s.errors} | ${
      s.p50.toFixed(2)
    } | ${s.p99.toFixed(2)} | ${f(s.rssMin)}-${f(s.rssMax)} |`
  ),
];
console.log(rows.join("\n"));
const steady = result.steady;
console.log(
  `RSS at start ${
    f(result.started.rss)
  } MiB; steady (samples from ${windowSeconds} s to the end of load) ${f(Math.min(...steady))}-${
    f(Math.max(...steady))
  } MiB, median ${f(median(steady))}; peak (VmHWM) ${
    f(result.atLoadEnd.hwm)
  } MiB at the end of load, ${f(result.idle.hwm)} MiB after idling; after ${idleSeconds} s idle ${
    f(result.idle.rss)
  } MiB`,
);
// When the peak was reached: VmHWM's last rise between two samples (none: before the first).
const rise = result.samples.findIndex(([, , hwm]) => hwm >= result.idle.hwm);
console.log(
  rise > 0
    ? `peak reached between ${f(result.samples[rise - 1]![0])} s and ${
      f(result.samples[rise]![0])
    } s`
    : "peak reached before the first sample",
);
if (args.json !== undefined) {
  await Deno.writeTextFile(args.json, JSON.stringify({ args, ...result }));
}
