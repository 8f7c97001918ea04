/**
 * The load benchmark: the service against its ceiling, in interleaved rounds.
 *
 * Starts the service (`main.ts --listen`, trusted-proxy mode so that the wrk script's
 * `X-Forwarded-For` values are real callers) and the reference servers (`load_servers.ts`), both
 * pinned to one core with `taskset`, and runs `wrk` pinned to the other core against each in turn:
 * for every round, every scenario, the service, its ceiling (the same status, fields and body from a
 * prebuilt `Response`, cloned), the bare one-header server and, in the scenarios marked `peer`, Hono
 * with hono-rate-limiter (`load_hono.ts`). A scenario with its own environment (the hot caller) gets
 * its own service process. Rounds interleave the servers so that
 * noise from other work on the machine falls on all of them alike; the report gives the median and
 * the range of every figure and of the ratios computed within each round.
 *
 * Usage (see `tests/bench/load.sh`, which installs wrk if it is missing):
 *   deno run --allow-run --allow-net=127.0.0.1 --allow-read --allow-env --allow-write=.bench \
 *     tests/bench/load.ts [--rounds 3] [--duration 5] [--connections 50] [--access-log off|on|both]
 *     [--explore] [--floor] [--paired] [--scenarios json,hot,markdown,404,429]
 *
 * `--floor` adds one reference server to the JSON and hot-caller scenarios: the ceiling plus the
 * reads every server of this spec must make (`x-ceiling-plus-reads`; `--explore` adds it and others
 * to the JSON scenario).
 *
 * `--paired` adds, after the interleaved rounds, rounds in which the service and each other server
 * run at the same time on the server core (see below): a steadier ratio on a machine whose cores are
 * shared with other work.
 *
 * `--otel` adds, in the JSON scenario, the service with Deno's OpenTelemetry exporter on (pointed at
 * an OTLP/HTTP receiver in this process, `tests/_otlp_receiver.ts`, in the default http/protobuf):
 * metrics only (`otel-metrics`), metrics and every trace (`otel-traces`), and traces sampled at 5%
 * (`otel-traces-5%`, `parentbased_traceidratio`). `--base <dir>` adds the service of another
 * checkout (built and started as its `deno task start` does; repeat it for several, each named
 * `base:<folder>`), e.g. main's, as `base` in every
 * scenario (one process per scenario environment, as the service): interleaved with the service in
 * each round, and with `--paired` the ratio of this service to it over the same seconds.
 *
 * Only 127.0.0.1 is ever targeted; every wrk run is bounded by `--duration`.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { parseArgs } from "node:util";
import { SCENARIOS } from "./_scenarios.ts";
import { startTaskArgs, startTaskArgsOf } from "./_start_task.ts";
import { startReceiver } from "../_otlp_receiver.ts";

const { values: args } = parseArgs({
  // `deno task bench:load -- --rounds 5` passes the `--` on; it separates nothing here.
  args: Deno.args[0] === "--" ? Deno.args.slice(1) : Deno.args,
  options: {
    rounds: { type: "string", default: "3" },
    duration: { type: "string", default: "5" },
    connections: { type: "string", default: "50" },
    threads: { type: "string", default: "2" },
    "access-log": { type: "string", default: "off" },
    explore: { type: "boolean", default: false },
    floor: { type: "boolean", default: false },
    paired: { type: "boolean", default: false },
    otel: { type: "boolean", default: false },
    base: { type: "string", multiple: true, default: [] },
    scenarios: { type: "string", default: SCENARIOS.map((s) => s.name).join(",") },
    "server-cpu": { type: "string", default: "0" },
    "client-cpu": { type: "string", default: "1" },
  },
});
const rounds = Number(args.rounds);
const duration = Number(args.duration);
if (!(rounds >= 1 && rounds <= 20 && duration >= 1 && duration <= 60)) {
  throw new Error("--rounds must be 1..20 and --duration 1..60 (seconds)");
}
const scenarios = SCENARIOS.filter((s) => args.scenarios.split(",").includes(s.name));
const logModes = args["access-log"] === "both" ? ["off", "on"] : [args["access-log"]];
const here = import.meta.dirname!;
const root = `${here}/../..`;

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

const baseEnv = {
  HOSTNAME: "127.0.0.1",
  TRUSTED_PROXIES: "127.0.0.1",
  PUBLIC_BASE_URL: "http://localhost:8000",
};

async function waitFor(url: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    try {
      const response = await fetch(url);
      await response.body?.cancel();
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw new Error(`${url} did not come up`);
}

/** Port -> the pid of the process listening on it (for its CPU time and peak RSS). */
const pidOf: Record<number, number> = {};
const children: Deno.ChildProcess[] = [];
function spawn(
  argv: string[],
  env: Record<string, string>,
  stdout: "null" | "piped",
  cwd: string = root,
) {
  const child = new Deno.Command("taskset", {
    args: ["-c", args["server-cpu"], Deno.execPath(), ...argv],
    env,
    cwd,
    stdout,
    stderr: "inherit",
  }).spawn();
  children.push(child);
  return child;
}
function stopAll() {
  for (const child of children) {
    try {
      child.kill("SIGTERM");
    } catch { /* already gone */ }
  }
}
Deno.addSignalListener("SIGINT", () => {
  stopAll();
  Deno.exit(130);
});

/** Reads the `READY {...}` line a reference server prints once it listens. */
async function readyPorts(child: Deno.ChildProcess): Promise<Record<string, number>> {
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let line = "";
  while (!line.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error("a reference server exited");
    line += value;
  }
  reader.releaseLock();
  child.stdout.cancel().catch(() => {});
  return JSON.parse(line.slice(line.indexOf("{")));
}

// The servers under test: the service once per access-log mode (and once more per scenario with its
// own environment), Hono once per scenario it runs, the reference servers once.
const serviceNames = logModes.map((mode) => `service${logModes.length > 1 ? `-log-${mode}` : ""}`);
/** Scenario name -> service name -> port. */
const targetsOf: Record<string, Record<string, number>> = {};
const servicePids: Record<string, number> = {};
const started = new Map<string, Record<string, number>>();
for (const scenario of scenarios) {
  const envKey = JSON.stringify(scenario.env ?? {});
  if (!started.has(envKey)) {
    const ports: Record<string, number> = {};
    for (const [i, mode] of logModes.entries()) {
      const port = freePort();
      const pid = spawn(
        startTaskArgs(),
        {
          ...baseEnv,
          ...scenario.env,
          PORT: String(port),
          ACCESS_LOG: mode === "on" ? "true" : "false",
        },
        "null", // the access log goes to /dev/null: its formatting is measured, not a terminal
      ).pid;
      pidOf[port] = pid;
      servicePids[`${serviceNames[i]}${scenario.env ? ` (${scenario.name})` : ""}`] = pid;
      ports[serviceNames[i]!] = port;
      await waitFor(`http://127.0.0.1:${port}/llms.txt`);
    }
    started.set(envKey, ports);
  }
  targetsOf[scenario.name] = started.get(envKey)!;
}
/** Scenario name -> the port of Hono + hono-rate-limiter configured as the service is for it. */
const honoOf: Record<string, number> = {};
const honoPids: Record<string, number> = {};
for (const scenario of scenarios.filter((s) => s.peer)) {
  const child = spawn(
    [
      "run",
      `--lock=${here}/../deno.lock`,
      "--allow-net",
      "--allow-read=./static",
      "--allow-env",
      `${here}/load_hono.ts`,
    ],
    { ...baseEnv, ...scenario.env, PORT: "8000", ACCESS_LOG: "false" },
    "piped",
  );
  const port = (await readyPorts(child)).hono!;
  honoOf[scenario.name] = port;
  pidOf[port] = child.pid;
  honoPids[`hono (${scenario.name})`] = child.pid;
}
const refs = spawn(
  [
    "run",
    "--allow-net",
    "--allow-read=./static",
    "--allow-env",
    `${here}/load_servers.ts`,
    ...(args.explore ? ["--explore"] : []),
    ...(args.floor ? ["--floor"] : []),
  ],
  { ...baseEnv, PORT: "8000", ACCESS_LOG: "false" },
  "piped",
);
const refPorts = await readyPorts(refs);
for (const port of Object.values(refPorts)) pidOf[port] = refs.pid;

/** The OpenTelemetry variants of the service (`--otel`), each with its environment. */
const OTEL_VARIANTS: Record<string, Record<string, string>> = {
  "otel-metrics": { OTEL_DENO: "true", OTEL_DENO_TRACING: "false" },
  "otel-traces": { OTEL_DENO: "true" },
  "otel-traces-5%": {
    OTEL_DENO: "true",
    OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
    OTEL_TRACES_SAMPLER_ARG: "0.05",
  },
};

/** A server started beside the service in one scenario (`--otel`, `--base`). */
interface Variant {
  server: string;
  port: number;
  /** The scenario it runs in. */
  scenario: string;
}

/** The `--base` services' processes, by name (for their peak RSS). */
const basePids: Record<string, number> = {};

/** Starts the `--otel` variants (and their receiver) and the `--base` services; their ports. */
async function startVariants(): Promise<Variant[]> {
  const variants: Variant[] = [];
  const start = async (env: Record<string, string>, cwd = root) => {
    const port = freePort();
    const env_ = { ...baseEnv, ...env, PORT: String(port), ACCESS_LOG: "false" };
    pidOf[port] = spawn(cwd === root ? startTaskArgs() : startTaskArgsOf(cwd), env_, "null", cwd)
      .pid;
    await waitFor(`http://127.0.0.1:${port}/llms.txt`);
    return port;
  };
  if (args.otel) {
    const receiver = startReceiver();
    for (const [server, env] of Object.entries(OTEL_VARIANTS)) {
      const port = await start({
        ...env,
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
        OTEL_EXPORTER_OTLP_TIMEOUT: "500",
        OTEL_METRIC_EXPORT_INTERVAL: "1000",
      });
      if (scenarios.some((s) => s.name === "json")) {
        variants.push({ server, port, scenario: "json" });
      }
    }
  }
  for (const base of args.base) {
    const built = new Deno.Command("deno", { args: ["task", "build"], cwd: base }).outputSync();
    if (!built.success) throw new Error(`deno task build failed in ${base}`);
    // One base is "base"; several are told apart by their folder's name.
    const server = args.base.length === 1
      ? "base"
      : `base:${base.replace(/\/+$/, "").split("/").at(-1)}`;
    const byEnv = new Map<string, number>();
    for (const scenario of scenarios) {
      const envKey = JSON.stringify(scenario.env ?? {});
      if (!byEnv.has(envKey)) {
        const port = await start(scenario.env ?? {}, base);
        byEnv.set(envKey, port);
        basePids[`${server}${scenario.env ? ` (${scenario.name})` : ""}`] = pidOf[port]!;
      }
      variants.push({ server, port: byEnv.get(envKey)!, scenario: scenario.name });
    }
  }
  return variants;
}

const variants = await startVariants();

interface Run {
  rps: number;
  /** CPU seconds the server's process used during the run. */
  cpu: number;
  /** Requests per second of server CPU time (user + system): what contention on the machine cannot skew. */
  rpsCpu: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx3xx: number;
}

/** CPU seconds (user + system, every thread) a process has used, from /proc. */
async function cpuSeconds(pid: number): Promise<number> {
  // Through cat: Deno asks for --allow-all to read /proc/<pid> itself.
  const out = await new Deno.Command("cat", { args: [`/proc/${pid}/stat`], stdout: "piped" })
    .output();
  const stat = new TextDecoder().decode(out.stdout);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in USER_HZ (100)
}

async function wrk(
  port: number,
  scenario: typeof SCENARIOS[number],
  seconds: number,
  threads = args.threads,
  connections = args.connections,
): Promise<Run> {
  const pid = pidOf[port]!;
  const cpuBefore = await cpuSeconds(pid);
  const out = await new Deno.Command("taskset", {
    args: [
      "-c",
      args["client-cpu"],
      "wrk",
      `-t${threads}`,
      `-c${connections}`,
      `-d${seconds}s`,
      "--timeout",
      "2s",
      "-s",
      `${here}/load.lua`,
      `http://127.0.0.1:${port}${scenario.path}`,
      "--",
      String(scenario.callers),
      scenario.accept ?? "-",
      threads,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const json = text.split("\n").find((l) => l.startsWith("WRKJSON "));
  if (!json) throw new Error(`wrk failed: ${text}${new TextDecoder().decode(out.stderr)}`);
  const r = JSON.parse(json.slice(8));
  const cpu = await cpuSeconds(pid) - cpuBefore;
  return {
    rps: r.requests / (r.duration_us / 1e6),
    cpu,
    rpsCpu: r.requests / cpu,
    p50: r.p50_us / 1000,
    p99: r.p99_us / 1000,
    errors: r.connect + r.read + r.write + r.timeout,
    non2xx3xx: r.non2xx3xx,
  };
}

/** Checks that the ceiling answers what the service answers: status, field names, body length. */
async function compare(scenario: typeof SCENARIOS[number]): Promise<string> {
  const get = async (port: number) => {
    const headers: Record<string, string> = {
      "x-forwarded-for": "10.254.0.1",
      "accept-encoding": "identity", // as wrk: fetch would ask for gzip and br
    };
    if (scenario.callers === 1) headers["x-forwarded-for"] = "10.255.255.255";
    if (scenario.accept) headers["accept"] = scenario.accept;
    const response = await fetch(`http://127.0.0.1:${port}${scenario.path}`, { headers });
    const body = await response.arrayBuffer();
    return {
      status: response.status,
      names: [...response.headers.keys()].filter((n) => n !== "date").sort().join(","),
      length: body.byteLength,
    };
  };
  const service = await get(targetsOf[scenario.name]![serviceNames[0]!]!);
  const ceiling = await get(refPorts[`ceiling-${scenario.name}`]!);
  if (service.status !== scenario.status) {
    return `MISMATCH: service answered ${service.status}, expected ${scenario.status}`;
  }
  if (JSON.stringify(service) !== JSON.stringify(ceiling)) {
    return `MISMATCH: service ${JSON.stringify(service)} ceiling ${JSON.stringify(ceiling)}`;
  }
  return `same status ${service.status}, ${
    service.names.split(",").length
  } fields (+date), ${service.length} bytes`;
}

/** The ceiling plus the reads every server of this spec must make (`--floor`, `--explore`). */
const FLOOR = "x-ceiling-plus-reads";
const exploreNames = Object.keys(refPorts).filter((n) => n.startsWith("x-"));
const plan: Array<{ scenario: typeof SCENARIOS[number]; server: string; port: number }[]> = [];
for (const scenario of scenarios) {
  const servers = [
    ...serviceNames.map((name) => ({ server: name, port: targetsOf[scenario.name]![name]! })),
    ...variants.filter((v) => v.scenario === scenario.name).map(({ server, port }) => ({
      server,
      port,
    })),
    { server: "ceiling", port: refPorts[`ceiling-${scenario.name}`]! },
    { server: "bare", port: refPorts["bare"]! },
    ...(scenario.peer ? [{ server: "hono", port: honoOf[scenario.name]! }] : []),
    ...(scenario.name === "json"
      ? exploreNames.map((name) => ({ server: name, port: refPorts[name]! }))
      : []),
    // The reads floor beside Hono in the hot caller too (its fields are the JSON scenario's: the
    // same names and body, a few bytes of values apart).
    ...(scenario.name === "hot" && refPorts[FLOOR] !== undefined
      ? [{ server: FLOOR, port: refPorts[FLOOR] }]
      : []),
  ];
  plan.push(servers.map((s) => ({ scenario, ...s })));
}
const runsPerRound = plan.reduce((n, p) => n + p.length, 0);
const pairsPerRound = args.paired ? runsPerRound - plan.length : 0;
console.log(
  `load benchmark: ${rounds} rounds x ${runsPerRound} runs${
    pairsPerRound ? ` (+ ${pairsPerRound} paired)` : ""
  } x ${duration} s ≈ ${
    Math.ceil(
      (rounds * (runsPerRound + pairsPerRound) * (duration + 0.5) + runsPerRound * 2) / 60,
    )
  } min; wrk -t${args.threads} -c${args.connections} on cpu ${args["client-cpu"]}, servers on cpu ${
    args["server-cpu"]
  }`,
);
// Warm-up: every server gets 2 s of its scenario before the measured rounds.
for (const runs of plan) for (const r of runs) await wrk(r.port, r.scenario, 2);
for (const scenario of scenarios) console.log(`  ${scenario.name}: ${await compare(scenario)}`);

const results = new Map<string, Run[]>();
for (let round = 0; round < rounds; round++) {
  for (const runs of plan) {
    // Rotate the order each round so that no server always runs first or after the same one.
    const order = runs.map((_, i) => runs[(i + round) % runs.length]!);
    for (const r of order) {
      const run = await wrk(r.port, r.scenario, duration);
      const key = `${r.scenario.name}|${r.server}`;
      if (!results.has(key)) results.set(key, []);
      results.get(key)!.push(run);
    }
  }
  console.log(`round ${round + 1}/${rounds} done`);
}

// --paired: the service and one other server at the same time, both on the server core, each with
// its own wrk (half the threads and connections) on the client core. Both are saturated, so the
// scheduler gives each half the core, and the ratio of their throughputs is the ratio of their costs
// per request, measured over the very same seconds: a burst of other work on the machine falls on
// both alike. Latency means little here (the core is shared), so only the ratio is reported.
interface Pair {
  /** Service rps / the other server's rps, over the same seconds. */
  ratio: number;
  /** The same per CPU second of each process: it holds even if the core was not shared evenly. */
  ratioCpu: number;
  /** The service's share of the CPU time the two used. */
  share: number;
  /** Socket errors (connect, read, write, timeout) of both wrk runs. */
  errors: number;
}
const paired = new Map<string, Pair[]>();
if (args.paired) {
  const half = (n: string) => String(Math.max(1, Math.floor(Number(n) / 2)));
  for (let round = 0; round < rounds; round++) {
    for (const runs of plan) {
      const service = runs[0]!;
      for (const other of runs.slice(1)) {
        const load = (r: typeof service) =>
          wrk(r.port, r.scenario, duration, half(args.threads), half(args.connections));
        // Alternate which wrk starts first.
        const [mine, theirs] = round % 2 === 0
          ? await Promise.all([load(service), load(other)])
          : (await Promise.all([load(other), load(service)])).reverse() as [Run, Run];
        const key = `${other.scenario.name}|${other.server}`;
        if (!paired.has(key)) paired.set(key, []);
        paired.get(key)!.push({
          ratio: mine.rps / theirs.rps,
          ratioCpu: mine.rpsCpu / theirs.rpsCpu,
          share: mine.cpu / (mine.cpu + theirs.cpu),
          errors: mine.errors + theirs.errors,
        });
      }
    }
    console.log(`paired round ${round + 1}/${rounds} done`);
  }
}
/** Peak resident memory (VmHWM) of a process over its life so far, in MiB. */
async function peakRssMiB(pid: number): Promise<number> {
  const out = await new Deno.Command("cat", { args: [`/proc/${pid}/status`], stdout: "piped" })
    .output();
  const kb = /VmHWM:\s+(\d+) kB/.exec(new TextDecoder().decode(out.stdout))?.[1];
  return Number(kb) / 1024;
}
const peaks: Record<string, number> = {};
for (const [name, pid] of Object.entries({ ...servicePids, ...basePids, ...honoPids })) {
  peaks[name] = await peakRssMiB(pid);
}
stopAll();

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const spread = (xs: number[], digits: number) =>
  `${median(xs).toFixed(digits)} [${Math.min(...xs).toFixed(digits)}–${
    Math.max(...xs).toFixed(digits)
  }]`;

const rows: string[] = [];
rows.push(
  "| scenario | server | rps | p50 ms | p99 ms | rps / ceiling | p99 / ceiling | rps / bare | rps per CPU-s / ceiling's |",
);
rows.push("|---|---|---|---|---|---|---|---|---|");
for (const runs of plan) {
  const name = runs[0]!.scenario.name;
  const ceiling = results.get(`${name}|ceiling`)!;
  const bare = results.get(`${name}|bare`)!;
  for (const r of runs) {
    const rs = results.get(`${name}|${r.server}`)!;
    const perRound = (f: (x: Run, c: Run) => number, base: Run[]) =>
      rs.map((x, i) => f(x, base[i]!));
    const errors = rs.reduce((n, x) => n + x.errors, 0);
    rows.push(
      `| ${name} | ${r.server}${errors ? ` (${errors} socket errors)` : ""} | ${
        spread(rs.map((x) => x.rps), 0)
      } | ${spread(rs.map((x) => x.p50), 2)} | ${spread(rs.map((x) => x.p99), 2)} | ${
        spread(perRound((x, c) => x.rps / c.rps, ceiling), 3)
      } | ${spread(perRound((x, c) => x.p99 / c.p99, ceiling), 2)} | ${
        spread(perRound((x, c) => x.rps / c.rps, bare), 3)
      } | ${spread(perRound((x, c) => x.rpsCpu / c.rpsCpu, ceiling), 3)} |`,
    );
  }
}
if (args.paired) {
  rows.push(
    "",
    `paired (${serviceNames[0]} and the other server at once, sharing the server core):`,
    "",
    "| scenario | against | service rps / its rps | the same per CPU second | service's CPU share |",
    "|---|---|---|---|---|",
  );
  for (const [key, pairs] of paired) {
    const [name, server] = key.split("|");
    const errors = pairs.reduce((n, p) => n + p.errors, 0);
    rows.push(
      `| ${name} | ÷ ${server}${errors ? ` (${errors} socket errors)` : ""} | ${
        spread(pairs.map((p) => p.ratio), 3)
      } | ${spread(pairs.map((p) => p.ratioCpu), 3)} | ${spread(pairs.map((p) => p.share), 2)} |`,
    );
  }
}
rows.push(
  "",
  "peak RSS (VmHWM) of each process over the whole benchmark, warm-up included:",
  "",
  ...Object.entries(peaks).map(([name, mib]) => `- ${name}: ${mib.toFixed(0)} MiB`),
);
const report = rows.join("\n");
console.log(
  `\nmedian [min–max] over ${rounds} rounds; ratios are taken within each round, then summarised\n`,
);
console.log(report);
await Deno.mkdir(`${root}/.bench`, { recursive: true });
const stamp = new Date().toISOString().replace(/[:.]/g, "-");
await Deno.writeTextFile(
  `${root}/.bench/load-${stamp}.json`,
  JSON.stringify(
    { args, results: Object.fromEntries(results), paired: Object.fromEntries(paired), peaks },
    null,
    2,
  ),
);
await Deno.writeTextFile(`${root}/.bench/load-${stamp}.md`, report + "\n");
Deno.exit(0);
