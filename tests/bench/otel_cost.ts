/**
 * What OpenTelemetry costs the hot caller (`deno task bench:otel`): the service as `deno task start`
 * runs it, once per configuration, every configuration beside OpenTelemetry off in one run, each
 * exporting to a real OTLP/HTTP receiver in this process (`tests/_otlp_receiver.ts`, which decodes
 * every JSON export as a collector would and keeps only the metrics).
 *
 * The services share one core (`taskset`), wrk runs on the other; rounds interleave the
 * configurations so that noise from other work on the machine falls on all of them alike, and the
 * report gives each configuration's req/s as a ratio to OpenTelemetry off within each round (median
 * and range), the same per second of the service's CPU time, its p99, and its peak RSS (VmHWM) at
 * the end. Paired rounds then run each configuration and off at the same time on the one server
 * core, each with half of wrk: the steadiest ratio on a machine shared with other work. It then
 * prints what the JSON exporters' receiver holds: decisions against the requests wrk saw answered.
 *
 * Usage: deno task bench:otel [--rounds 3] [--duration 5] [--connections 50] [--only a,b]
 *
 * Only 127.0.0.1 is ever targeted; every wrk run is bounded by `--duration`.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { parseArgs } from "node:util";
import { HOT_CALLER_ENV } from "./_scenarios.ts";
import { startTaskArgs } from "./_start_task.ts";
import { freePort, status } from "./_proc.ts";
import { attribute, pointsOf, startReceiver, valueOf } from "../_otlp_receiver.ts";

const { values: args } = parseArgs({
  args: Deno.args[0] === "--" ? Deno.args.slice(1) : Deno.args,
  options: {
    rounds: { type: "string", default: "3" },
    duration: { type: "string", default: "5" },
    connections: { type: "string", default: "50" },
    only: { type: "string" },
    "server-cpu": { type: "string", default: "0" },
    "client-cpu": { type: "string", default: "1" },
  },
});
const rounds = Number(args.rounds);
const duration = Number(args.duration);
const connections = Number(args.connections);
if (!(rounds >= 1 && rounds <= 20 && duration >= 1 && duration <= 60)) {
  throw new Error("--rounds must be 1..20 and --duration 1..60 (seconds)");
}
if (!(Number.isInteger(connections) && connections >= 1 && connections <= 1000)) {
  throw new Error("--connections must be an integer in 1..1000");
}
const here = import.meta.dirname!;
const root = `${here}/../..`;

/** README's OpenTelemetry command, the documented one: metrics and logs, tracing off. */
const DOCUMENTED = {
  OTEL_DENO: "true",
  OTEL_DENO_TRACING: "false",
  OTEL_DENO_CONSOLE: "replace",
  OTEL_SERVICE_NAME: "discovery",
  OTEL_EXPORTER_OTLP_TIMEOUT: "500",
  OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
  OTEL_METRIC_EXPORT_INTERVAL: "5000",
};
const TRACING = { ...DOCUMENTED, OTEL_DENO_TRACING: "true" };

/** The configurations, in report order: the first is the reference. */
const CONFIGURATIONS: Record<string, Record<string, string>> = {
  "OpenTelemetry off": {},
  "README's command (`OTEL_DENO_TRACING=false`, http/json)": DOCUMENTED,
  "the same in http/protobuf (Deno's default protocol)": {
    ...DOCUMENTED,
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
  },
  "logs only (`OTEL_DENO_METRICS=false`): no metric, not even Deno's": {
    ...DOCUMENTED,
    OTEL_DENO_METRICS: "false",
  },
  "tracing on (`OTEL_DENO_TRACING=true`), every request traced": TRACING,
  "tracing on, `OTEL_TRACES_SAMPLER=parentbased_traceidratio` 0.05": {
    ...TRACING,
    OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
    OTEL_TRACES_SAMPLER_ARG: "0.05",
  },
  "tracing on, `OTEL_TRACES_SAMPLER=always_off`": { ...TRACING, OTEL_TRACES_SAMPLER: "always_off" },
};

const names = Object.keys(CONFIGURATIONS).filter((name, i) =>
  i === 0 || args.only === undefined ||
  args.only.split(",").some((word) => name.includes(word.trim()))
);

interface Run {
  rps: number;
  /** Requests per second of the service's CPU time: what other work on the core cannot skew. */
  rpsCpu: number;
  p99: number;
  requests: number;
}

/** CPU seconds (user + system, every thread) a process has used, from /proc (through cat). */
async function cpuSeconds(pid: number): Promise<number> {
  const out = await new Deno.Command("cat", { args: [`/proc/${pid}/stat`], stdout: "piped" })
    .output();
  const stat = new TextDecoder().decode(out.stdout);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in USER_HZ (100)
}

const receiver = startReceiver({ keep: "metrics" });
const children: Deno.ChildProcess[] = [];
/** Requests wrk saw answered, per port, warm-ups included. */
const answeredOn = new Map<number, number>();

/** Starts the service with `env` on the server core; its port and pid. */
async function startService(env: Record<string, string>): Promise<{ port: number; pid: number }> {
  const port = freePort();
  const child = new Deno.Command("taskset", {
    args: ["-c", args["server-cpu"], Deno.execPath(), ...startTaskArgs()],
    env: {
      ...env,
      ...(env.OTEL_DENO ? { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint } : {}),
      ...HOT_CALLER_ENV,
      HOSTNAME: "127.0.0.1",
      PORT: String(port),
      TRUSTED_PROXIES: "127.0.0.1",
      PUBLIC_BASE_URL: "http://localhost:8000",
      ACCESS_LOG: "false",
    },
    cwd: root,
    stdout: "null",
    stderr: "null",
  }).spawn();
  children.push(child);
  for (let i = 0; i < 100; i++) {
    try {
      await (await fetch(`http://127.0.0.1:${port}/llms.txt`)).body?.cancel();
      return { port, pid: child.pid };
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  throw new Error(`the service (${JSON.stringify(env)}) did not come up`);
}

/** One wrk run of the hot caller against the service on `port` (process `pid`). */
async function wrk(port: number, pid: number, seconds: number, share = 1): Promise<Run> {
  const cpuBefore = await cpuSeconds(pid);
  const out = await new Deno.Command("taskset", {
    args: [
      "-c",
      args["client-cpu"],
      "wrk",
      `-t${2 / share}`,
      `-c${Math.max(1, Math.round(connections / share))}`,
      `-d${seconds}s`,
      "--timeout",
      "2s",
      "-s",
      `${here}/load.lua`,
      `http://127.0.0.1:${port}/api/v1/platform`,
      "--",
      "1",
      "application/json",
      String(2 / share),
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const line = text.split("\n").find((l) => l.startsWith("WRKJSON "));
  if (!line) throw new Error(`wrk failed: ${text}${new TextDecoder().decode(out.stderr)}`);
  const r = JSON.parse(line.slice(8));
  if (r.non2xx3xx > 0) throw new Error(`${r.non2xx3xx} answers were not 200 on port ${port}`);
  answeredOn.set(port, (answeredOn.get(port) ?? 0) + r.requests);
  const cpu = await cpuSeconds(pid) - cpuBefore;
  return {
    rps: r.requests / (r.duration_us / 1e6),
    rpsCpu: r.requests / cpu,
    p99: r.p99_us / 1000,
    requests: r.requests,
  };
}

/** The median of `values`, and their range, as `median (min-max)`. */
function spread(values: number[], digits: number): string {
  const sorted = [...values].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)]!;
  const f = (n: number) => n.toFixed(digits);
  return sorted.length === 1 ? f(median) : `${f(median)} (${f(sorted[0]!)}-${f(sorted.at(-1)!)})`;
}

/** The decisions the services have exported, summed over the series of `outcome`. */
function exportedDecisions(outcome: string): number {
  const byService = new Map<string, number>();
  for (const point of pointsOf(receiver.received, "ratelimit.decisions")) {
    if (attribute(point.attributes, "ratelimit.outcome") !== outcome) continue;
    const key = String(point.startTimeUnixNano);
    byService.set(key, Math.max(byService.get(key) ?? 0, valueOf(point)));
  }
  return [...byService.values()].reduce((sum, value) => sum + value, 0);
}

const services: Record<string, { port: number; pid: number }> = {};
try {
  for (const name of names) services[name] = await startService(CONFIGURATIONS[name]!);
  const run = (name: string, seconds: number) =>
    wrk(services[name]!.port, services[name]!.pid, seconds);
  for (const name of names) await run(name, 2); // warm-up, not reported
  const runs: Record<string, Run[]> = Object.fromEntries(names.map((name) => [name, []]));
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? names : [...names].reverse();
    for (const name of order) runs[name]!.push(await run(name, duration));
  }
  // Paired: each configuration and off at the same time on the one server core, each with half of
  // wrk: both get the same share of whatever else the machine runs, over the same seconds.
  const paired: Record<string, number[]> = Object.fromEntries(names.map((name) => [name, []]));
  for (let round = 0; round < rounds; round++) {
    for (const name of names.slice(1)) {
      const [off, own] = await Promise.all(
        [names[0]!, name].map((n) => wrk(services[n]!.port, services[n]!.pid, duration, 2)),
      );
      paired[name]!.push(own!.rps / off!.rps);
    }
  }
  const memory: Record<string, number> = {};
  for (const name of names) memory[name] = (await status(services[name]!.pid)).hwm;
  report(runs, paired, memory);
  await stopAll();
  // The receiver decodes JSON exports only (protobuf ones are counted); logs only exports none.
  const answered = names.filter((name) =>
    CONFIGURATIONS[name]!.OTEL_EXPORTER_OTLP_PROTOCOL === "http/json" &&
    CONFIGURATIONS[name]!.OTEL_DENO_METRICS !== "false"
  )
    .reduce((sum, name) => sum + (answeredOn.get(services[name]!.port) ?? 0), 0);
  console.log(
    `\nDecisions "admitted" the receiver holds after the exits: ${
      exportedDecisions("admitted")
    }; ` +
      `requests wrk saw answered by the services exporting JSON: ${answered} (the decisions also count\n` +
      `the requests wrk sent but had not read when its run ended, and each start-up's readiness probe). ` +
      `Exports received: ${exportCounts()}.`,
  );
} finally {
  await stopAll();
  await receiver.close();
}

/** Stops every service (SIGTERM: their exits export the last metrics) and waits for their exits. */
async function stopAll(): Promise<void> {
  for (const child of children) {
    try {
      child.kill("SIGTERM");
    } catch { /* already gone */ }
  }
  await Promise.all(children.map((child) => child.status));
}

/** The exports the receiver got, per signal. */
function exportCounts(): string {
  return ["metrics", "traces", "logs"].map((signal) =>
    `${receiver.received.requests.get(`/v1/${signal}`)?.count ?? 0} ${signal}`
  ).join(", ");
}

/** Prints the table and what the documented configuration exported. */
function report(
  runs: Record<string, Run[]>,
  paired: Record<string, number[]>,
  memory: Record<string, number>,
): void {
  const off = runs[names[0]!]!;
  console.log(
    `\nThe hot caller (one X-Forwarded-For, RATE_LIMIT=1000000), wrk -t2 -c${connections}, ` +
      `${rounds} interleaved rounds of ${duration} s, services on cpu ${args["server-cpu"]}, ` +
      `wrk on cpu ${args["client-cpu"]}; x off: the ratio within each round, median (range); ` +
      `paired: the configuration and off at once, each with half of wrk, ${rounds} rounds\n`,
  );
  console.log(
    "| configuration | req/s | x off | per CPU-s x off | paired x off | p99 ms | peak RSS MiB |",
  );
  console.log("|---|--:|--:|--:|--:|--:|--:|");
  for (const [index, name] of names.entries()) {
    const own = runs[name]!;
    const ratios = own.map((run, i) => run.rps / off[i]!.rps);
    const perCpu = own.map((run, i) => run.rpsCpu / off[i]!.rpsCpu);
    console.log(
      `| ${name} | ${spread(own.map((r) => r.rps), 0)} | ${spread(ratios, 2)} | ${
        spread(perCpu, 2)
      } | ${index === 0 ? "1.00" : spread(paired[name]!, 2)} | ${
        spread(own.map((r) => r.p99), 2)
      } | ${memory[name]!.toFixed(0)} |`,
    );
  }
}
