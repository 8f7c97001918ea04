/**
 * The Node benchmark (`deno task bench:node`): the service on Node (`lib/node/main.ts`, 24 and 26)
 * beside the Deno service (`main.ts --listen`, the same sources), and Node's references: `raw`
 * (`node:http` sending the bytes the Node service sent: the ceiling on Node) and `srvx` (the same
 * handler served by srvx), all in one run (`_node_refs.ts`).
 *
 * - Load: the JSON, hot-caller and 404 scenarios of `load.ts` (`_scenarios.ts`, `load.lua`), every
 *   server pinned to one core and wrk to the other, in interleaved rounds: req/s and requests per
 *   CPU-second of the server, median over the rounds, and each ratio to Deno's within its round.
 * - Memory: RSS after the warm-up (the "warmed up" event and one request of each scenario) and the
 *   peak (VmHWM) after the hot caller's rounds, of the service processes.
 * - Cold start: from spawn to the first 200 of `GET /api/v1/platform`, in interleaved runs.
 * - A kept response's clone against a fresh one, on Node (`_node_clone.ts`).
 *
 * `node24-bundle` is Node 24 running the entry bundled (`deno bundle --platform=node ... -o
 * dist/node/main.mjs lib/node/main.ts`), when it was built: the type stripping's cost.
 *
 * Options: `--rounds 3 --duration 4 --cold 8`. Only 127.0.0.1 is targeted, every wrk run bounded.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { parseArgs } from "node:util";
import { HOT_CALLER_ENV, type Scenario, SCENARIOS } from "./_scenarios.ts";
import { status } from "./_proc.ts";
import { nodeBinary } from "../_node.ts";

const { values: args } = parseArgs({
  args: Deno.args[0] === "--" ? Deno.args.slice(1) : Deno.args,
  options: {
    rounds: { type: "string", default: "3" },
    duration: { type: "string", default: "4" },
    cold: { type: "string", default: "8" },
    connections: { type: "string", default: "50" },
    // Starts every server and sends one request to each, with no load: a check of the script.
    dry: { type: "boolean", default: false },
  },
});
const ROOT = new URL("../..", import.meta.url).pathname;
const SERVER_CPU = "0";
const CLIENT_CPU = "1";
const NODE = { 24: await nodeBinary(24), 26: await nodeBinary(26) };
const BASE_ENV = {
  HOSTNAME: "127.0.0.1",
  PORT: "0",
  PUBLIC_BASE_URL: "http://127.0.0.1",
  ACCESS_LOG: "false",
  TRUSTED_PROXIES: "127.0.0.1",
  NO_COLOR: "1",
};
const scenarios = SCENARIOS.filter((s) => ["json", "hot", "404"].includes(s.name));

/** A process listening, with its pid and port. */
interface Running {
  name: string;
  pid: number;
  port: number;
  child: Deno.ChildProcess;
  events: Array<Record<string, unknown>>;
}

/** How each service runs: Deno's sources as `deno task start` flags them, Node's entry. */
const SERVICES: Record<string, string[]> = {
  deno: [
    Deno.execPath(),
    "run",
    "--v8-flags=--max-semi-space-size=2,--heap-growing-percent=50",
    "--unstable-net",
    "-A",
    `${ROOT}main.ts`,
    "--listen",
  ],
  node24: [NODE[24], `${ROOT}lib/node/main.ts`],
  node26: [NODE[26], `${ROOT}lib/node/main.ts`],
  // The same entry bundled to JavaScript (`deno bundle --platform=node`, when built): no type
  // stripping to load.
  ...(await Deno.stat(`${ROOT}dist/node/main.mjs`).then(() => true, () => false)
    ? { "node24-bundle": [NODE[24], `${ROOT}dist/node/main.mjs`] }
    : {}),
};

/** Starts a service pinned to the server core; resolves once it logs "listening". */
async function start(name: string, env: Record<string, string> = {}): Promise<Running> {
  const [command, ...rest] = SERVICES[name]!;
  const child = new Deno.Command("taskset", {
    args: ["-c", SERVER_CPU, command!, ...rest],
    env: { ...BASE_ENV, ...env },
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const events: Array<Record<string, unknown>> = [];
  const { promise, resolve } = Promise.withResolvers<number>();
  void (async () => {
    let pending = "";
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      pending += chunk;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      for (const line of lines) {
        try {
          const event = JSON.parse(line);
          events.push(event);
          if (event.message === "listening") resolve(Number(new URL(event.address).port));
        } catch { /* not an event */ }
      }
    }
  })();
  return { name, pid: child.pid, port: await promise, child, events };
}

async function cpuSeconds(pid: number): Promise<number> {
  // Through cat: Deno asks for --allow-all to read /proc/<pid> itself.
  const out = await new Deno.Command("cat", { args: [`/proc/${pid}/stat`], stdout: "piped" })
    .output();
  const stat = new TextDecoder().decode(out.stdout);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** One wrk run against `server`: req/s and requests per CPU-second of the server. */
async function wrk(
  server: { pid: number; port: number },
  scenario: Scenario,
  seconds = args.duration,
) {
  if (args.dry) {
    const response = await fetch(`http://127.0.0.1:${server.port}${scenario.path}`, {
      headers: { accept: scenario.accept ?? "*/*", "x-forwarded-for": "10.0.0.1" },
    });
    await response.body?.cancel();
    if (response.status !== scenario.status) throw new Error(`${server.port}: ${response.status}`);
    return { rps: 1, perCpu: 1, errors: 0 };
  }
  const before = await cpuSeconds(server.pid);
  const out = await new Deno.Command("taskset", {
    args: [
      ...["-c", CLIENT_CPU, "wrk", "-t2", `-c${args.connections}`, `-d${seconds}s`],
      ...["--timeout", "2s", "-s", `${ROOT}tests/bench/load.lua`],
      `http://127.0.0.1:${server.port}${scenario.path}`,
      ...["--", String(scenario.callers), scenario.accept ?? "-", "2"],
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const json = text.split("\n").find((line) => line.startsWith("WRKJSON "));
  if (!json) throw new Error(`wrk failed: ${text}`);
  const r = JSON.parse(json.slice(8));
  const cpu = await cpuSeconds(server.pid) - before;
  const errors = r.connect + r.read + r.write + r.timeout;
  return { rps: r.requests / (r.duration_us / 1e6), perCpu: r.requests / cpu, errors };
}

/** What the Node service sends for each scenario's path, for the raw server to send. */
async function capture(port: number): Promise<string> {
  const sent: Record<string, unknown> = {};
  for (const scenario of scenarios) {
    const response = await fetch(`http://127.0.0.1:${port}${scenario.path}`, {
      // Identity, as wrk asks: fetch would ask for br and decode it, the fields left encoded.
      headers: {
        accept: scenario.accept ?? "*/*",
        "x-forwarded-for": "10.254.0.1",
        "accept-encoding": "identity",
      },
    });
    const body = new Uint8Array(await response.arrayBuffer());
    const fields = [...response.headers].filter(([name]) => name !== "date").flat();
    sent[scenario.path] = { status: response.status, fields, body: body.toBase64() };
  }
  const file = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(file, JSON.stringify(sent));
  return file;
}

/** Starts the references (`_node_refs.ts`) on Node 24, pinned like the services. */
async function startRefs(file: string): Promise<Running[]> {
  const child = new Deno.Command("taskset", {
    args: ["-c", SERVER_CPU, NODE[24], `${ROOT}tests/bench/_node_refs.ts`, file],
    env: { ...BASE_ENV, ...HOT_CALLER_ENV },
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let line = "";
  while (!line.includes("\n")) line += (await reader.read()).value ?? "";
  const ports = JSON.parse(line.slice(line.indexOf("READY ") + 6));
  return ["raw", "srvx"].map((name) => ({
    name,
    pid: child.pid,
    port: ports[name],
    child,
    events: [],
  }));
}

const median = (values: number[]) =>
  values.toSorted((a, b) => a - b)[Math.floor(values.length / 2)]!;

/** Load: every server, every scenario, interleaved rounds; memory before and after. */
async function load(): Promise<void> {
  const normal = await Promise.all(Object.keys(SERVICES).map((name) => start(name)));
  const hot = await Promise.all(Object.keys(SERVICES).map((name) => start(name, HOT_CALLER_ENV)));
  const refs = await startRefs(await capture(normal[1]!.port));
  const servers = (scenario: Scenario) => [...(scenario.name === "hot" ? hot : normal), ...refs];
  // Warm-up: each service warmed up and every scenario answered once.
  for (const service of [...normal, ...hot]) {
    while (!service.events.some((e) => /^warmed up/.test(String(e.message)))) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  for (const scenario of scenarios) {
    for (const server of servers(scenario)) await wrk(server, scenario, "1");
  }
  const warm = Object.fromEntries(
    await Promise.all(normal.map(async (s) => [s.name, (await status(s.pid)).rss] as const)),
  );
  const results: Record<
    string,
    Record<string, Array<{ rps: number; perCpu: number; errors: number }>>
  > = {};
  for (let round = 0; round < Number(args.rounds); round++) {
    for (const scenario of scenarios) {
      for (const server of servers(scenario)) {
        ((results[scenario.name] ??= {})[server.name] ??= []).push(await wrk(server, scenario));
      }
    }
  }
  const peak = Object.fromEntries(
    await Promise.all(hot.map(async (s) => [s.name, (await status(s.pid)).hwm] as const)),
  );
  console.log(
    "\n| scenario | server | req/s | req per CPU-s | req/s ÷ Deno's | per CPU-s ÷ Deno's | errors |",
  );
  console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
  for (const [scenario, byServer] of Object.entries(results)) {
    const deno = byServer.deno!;
    for (const [server, runs] of Object.entries(byServer)) {
      const ratio = (key: "rps" | "perCpu") =>
        median(runs.map((run, i) => run[key] / deno[i]![key])).toFixed(2);
      console.log(
        `| ${scenario} | ${server} | ${median(runs.map((r) => r.rps)).toFixed(0)} | ${
          median(runs.map((r) => r.perCpu)).toFixed(0)
        } | ${ratio("rps")} | ${ratio("perCpu")} | ${runs.reduce((n, r) => n + r.errors, 0)} |`,
      );
    }
  }
  console.log("\n| service | RSS after warm-up (MiB) | peak after the hot caller (MiB) |");
  console.log("| --- | ---: | ---: |");
  for (const name of Object.keys(SERVICES)) {
    console.log(`| ${name} | ${warm[name]!.toFixed(1)} | ${peak[name]!.toFixed(1)} |`);
  }
  for (const running of [...normal, ...hot, refs[0]!]) running.child.kill("SIGTERM");
}

/** Cold start: spawn to the first 200, each service in turn, `--cold` times. */
async function cold(): Promise<void> {
  const times: Record<string, number[]> = {};
  for (let run = 0; run < Number(args.cold); run++) {
    for (const name of Object.keys(SERVICES)) {
      const started = performance.now();
      const service = await start(name);
      let ok = false;
      while (!ok) {
        ok = await fetch(`http://127.0.0.1:${service.port}/api/v1/platform`)
          .then(async (r) => (await r.body?.cancel(), r.status === 200))
          .catch(() => false);
      }
      (times[name] ??= []).push(performance.now() - started);
      service.child.kill("SIGKILL");
      await service.child.status;
    }
  }
  console.log("\n| service | cold start to the first 200 (ms, median) | ÷ Deno's |");
  console.log("| --- | ---: | ---: |");
  for (const [name, values] of Object.entries(times)) {
    const ratio = median(values.map((value, i) => value / times.deno![i]!));
    console.log(`| ${name} | ${median(values).toFixed(0)} | ${ratio.toFixed(2)} |`);
  }
}

console.log(`Node ${NODE[24]} / ${NODE[26]}; Deno ${Deno.version.deno}`);
/** The kept response's clone against a fresh one on Node 24 and 26 (`_node_clone.ts`). */
async function clones(): Promise<void> {
  console.log("\n| Node | kept clone, read (ns) | fresh Response, read (ns) | kept ÷ fresh |");
  console.log("| --- | ---: | ---: | ---: |");
  for (const major of [24, 26] as const) {
    const out = await new Deno.Command("taskset", {
      args: ["-c", SERVER_CPU, NODE[major], `${ROOT}tests/bench/_node_clone.ts`],
      stdout: "piped",
    }).output();
    const line = new TextDecoder().decode(out.stdout).split("\n").find((l) =>
      l.startsWith("CLONE ")
    );
    const r = JSON.parse(line!.slice(6));
    console.log(`| ${major} | ${r.keptNs} | ${r.freshNs} | ${r.ratio} |`);
  }
}

if (!args.dry) await cold();
await load();
if (!args.dry) await clones();
Deno.exit(0);
