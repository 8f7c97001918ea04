/**
 * The Node benchmark (`deno task bench:node`): the service on Node (`npm start`'s command,
 * package.json, on Node 24 and 26; and `node24-bare`, the entry without its flags and environment)
 * beside the Deno service (`main.ts --listen`, the same sources), what a Node user would run
 * instead (`_node_peer.ts`: Fastify 5 + @fastify/rate-limit and Express 5 + express-rate-limit, on
 * Node 24 and 26, installed for the run into a temporary folder), and Node's references
 * (`_node_refs.ts`): `raw` (`node:http` sending the bytes the Node service sent: the ceiling on
 * Node) and `srvx` (the same handler served by srvx), all in one run.
 *
 * - Load: the JSON, hot-caller, 404 and refused (429) scenarios of `load.ts` (`_scenarios.ts`,
 *   `load.lua`), every server pinned to one core and wrk to the other, in interleaved rounds: req/s
 *   and requests per CPU-second of the server, median over the rounds, and each ratio to Deno's and
 *   to Fastify's on Node 24 within its round. The peers answer the platform's JSON only: they run
 *   the JSON, hot-caller and refused scenarios.
 * - Memory: RSS after the warm-up (the "warmed up" event and one request of each scenario) and the
 *   peak (VmHWM) after the rounds, of each process.
 * - Cold start: from spawn to the first 200 of `GET /api/v1/platform`, in interleaved runs.
 *
 * Options: `--rounds 3 --duration 4 --cold 8`, `--servers node24,fastify24` (load only those; every
 * process still starts). Only 127.0.0.1 is targeted, every wrk run bounded.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { parseArgs } from "node:util";
import { HOT_CALLER_ENV, type Scenario, SCENARIOS } from "./_scenarios.ts";
import { status } from "./_proc.ts";
import { nodeBinary } from "../_node.ts";
import { npmStart } from "./_npm_start.ts";

const { values: args } = parseArgs({
  args: Deno.args[0] === "--" ? Deno.args.slice(1) : Deno.args,
  options: {
    rounds: { type: "string", default: "3" },
    duration: { type: "string", default: "4" },
    cold: { type: "string", default: "8" },
    connections: { type: "string", default: "50" },
    // The servers loaded, by name (e.g. `node24,fastify24`): more rounds of a pair in the same time.
    servers: { type: "string", default: "" },
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
const scenarios = SCENARIOS.filter((s) => ["json", "hot", "404", "429"].includes(s.name));
/** The scenarios of the peers, which serve the platform's JSON only. */
const PEER_SCENARIOS = new Set(["json", "hot", "429"]);
/**
 * The scenarios of the references: `raw` sends one captured answer per path, and srvx runs with
 * the hot caller's limit (so the refused path is not theirs).
 */
const REF_SCENARIOS = new Set(["json", "hot", "404"]);
/** The peers' packages, pinned: the latest of each major line when this benchmark was written. */
const PEER_PACKAGES = [
  "fastify@5.12.8",
  "@fastify/rate-limit@11.2.0",
  "express@5.3.0",
  "express-rate-limit@8.7.5",
];
/** The peers, each on Node 24 and 26 (`_node_peer.ts`). */
const PEERS = ["fastify24", "fastify26", "express24", "express26"] as const;

/** A process listening, with its pid and port. */
interface Running {
  name: string;
  pid: number;
  port: number;
  child: Deno.ChildProcess;
  events: Array<Record<string, unknown>>;
}

/** A service's command line and the environment it adds. */
interface Command {
  argv: string[];
  env?: Record<string, string>;
}

const START = await npmStart(ROOT);
/** The Node service as `npm start` runs it (package.json), on Node `major`. */
const npmStarted = (major: 24 | 26): Command => ({
  argv: [NODE[major], ...START.nodeArgs, ...START.entry],
  env: START.env,
});

/**
 * How each service runs: Deno's sources as `deno task start` flags them; Node's entry as `npm start`
 * runs it, and bare (`node lib/node/main.ts`: what its flags and environment cost and save).
 */
const SERVICES: Record<string, Command> = {
  deno: {
    argv: [
      Deno.execPath(),
      "run",
      "--v8-flags=--max-semi-space-size=2,--heap-growing-percent=50",
      "--unstable-net",
      "-A",
      "main.ts",
      "--listen",
    ],
  },
  node24: npmStarted(24),
  node26: npmStarted(26),
  "node24-bare": { argv: [NODE[24], "lib/node/main.ts"] },
};

/**
 * Starts `argv` pinned to the server core in the checkout; its stderr piped (a service's events)
 * or shown (a helper's errors).
 */
function spawnPinned(
  argv: string[],
  env: Record<string, string>,
  stderr: "piped" | "inherit" = "piped",
): Deno.ChildProcess {
  return new Deno.Command("taskset", {
    args: ["-c", SERVER_CPU, ...argv],
    cwd: ROOT,
    env: { ...BASE_ENV, ...env },
    stdout: "piped",
    stderr,
  }).spawn();
}

/** Starts a service pinned to the server core; resolves once it logs "listening". */
async function start(name: string, env: Record<string, string> = {}): Promise<Running> {
  const { argv, env: own = {} } = SERVICES[name]!;
  const child = spawnPinned(argv, { ...own, ...env });
  void child.stdout.cancel();
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

/** The ports a helper process prints on its first line, `READY {"name":port...}`. */
async function readyPorts(child: Deno.ChildProcess): Promise<Record<string, number>> {
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let line = "";
  while (!line.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`exited before it listened: ${line}`);
    line += value;
  }
  reader.releaseLock();
  return JSON.parse(line.slice(line.indexOf("READY ") + 6));
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
    if (response.status !== 200 && response.status !== scenario.status) {
      throw new Error(`${server.port}: ${response.status}`);
    }
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

/** The service's platform JSON and its 429 body (a caller's 61st request), for the peers to send. */
async function captureBodies(port: number): Promise<string> {
  const get = async (caller: string) => {
    const response = await fetch(`http://127.0.0.1:${port}/api/v1/platform`, {
      headers: { accept: "application/json", "x-forwarded-for": caller },
    });
    return { status: response.status, body: new Uint8Array(await response.arrayBuffer()) };
  };
  const platform = await get("10.254.0.2");
  let refused = await get("10.254.0.3");
  while (refused.status === 200) refused = await get("10.254.0.3");
  if (platform.status !== 200 || refused.status !== 429) {
    throw new Error(`captured ${platform.status} and ${refused.status}, not 200 and 429`);
  }
  const file = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(
    file,
    JSON.stringify({ platform: platform.body.toBase64(), refused: refused.body.toBase64() }),
  );
  return file;
}

/** Starts the references (`_node_refs.ts`) on Node 24, pinned like the services. */
async function startRefs(file: string): Promise<Running[]> {
  // srvx for this benchmark only: not in package.json, whose packages a Deno start fetches too.
  const install = await new Deno.Command("npm", {
    // engine-strict off, as `tests/_node.ts` installs: the machine's npm may run on an older Node.
    args: [
      ...["install", "--no-save", "--ignore-scripts", "--engine-strict=false", "--no-audit"],
      ...["--no-fund", "srvx@1.0.8"],
    ],
    cwd: ROOT,
    stdout: "null",
    stderr: "inherit",
  }).output();
  if (!install.success) throw new Error("npm install srvx@1.0.8 failed");
  const child = spawnPinned(
    [NODE[24], `${ROOT}tests/bench/_node_refs.ts`, file],
    HOT_CALLER_ENV,
    "inherit",
  );
  const ports = await readyPorts(child);
  return ["raw", "srvx"].map((name) => ({
    name,
    pid: child.pid,
    port: ports[name]!,
    child,
    events: [],
  }));
}

/** Installs the peers' packages into a temporary folder (nothing in the checkout); its path. */
async function installPeers(): Promise<string> {
  const folder = await Deno.makeTempDir({ prefix: "node-peers-" });
  // A package of its own, so that npm installs here and not into a package above.
  await Deno.writeTextFile(`${folder}/package.json`, '{"private":true}');
  const install = await new Deno.Command("npm", {
    // engine-strict off: the machine's npm may run on a Node older than the packages ask for.
    args: [
      ...["install", "--no-save", "--ignore-scripts", "--engine-strict=false", "--no-audit"],
      ...["--no-fund", ...PEER_PACKAGES],
    ],
    cwd: folder,
    stdout: "null",
    stderr: "inherit",
  }).output();
  if (!install.success) throw new Error(`npm install ${PEER_PACKAGES.join(" ")} failed`);
  return folder;
}

/** Starts a peer (`_node_peer.ts`) pinned like the services, under the scenario's `env`. */
async function startPeer(
  name: typeof PEERS[number],
  files: { folder: string; bodies: string },
  env: Record<string, string>,
): Promise<Running> {
  const which = name.slice(0, -2);
  const node = NODE[Number(name.slice(-2)) as 24 | 26];
  const child = spawnPinned(
    [node, `${ROOT}tests/bench/_node_peer.ts`, which, files.folder, files.bodies],
    env,
    "inherit",
  );
  const ports = await readyPorts(child);
  return { name, pid: child.pid, port: ports[which]!, child, events: [] };
}

const median = (values: number[]) =>
  values.toSorted((a, b) => a - b)[Math.floor(values.length / 2)]!;

/** One run's figures: per scenario and server, each round's req/s, per CPU-second and errors. */
type Results = Record<
  string,
  Record<string, Array<{ rps: number; perCpu: number; errors: number }>>
>;

/** Prints the load table: medians, and each round's ratio to Deno's and to Fastify's on Node 24. */
function printLoad(results: Results): void {
  console.log(
    "\n| scenario | server | req/s | req per CPU-s | req/s ÷ Deno's | per CPU-s ÷ Deno's | req/s ÷ Fastify 24's | per CPU-s ÷ Fastify 24's | errors |",
  );
  console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
  for (const [scenario, byServer] of Object.entries(results)) {
    for (const [server, runs] of Object.entries(byServer)) {
      const ratio = (to: string, key: "rps" | "perCpu") => {
        const reference = byServer[to];
        if (reference === undefined) return "";
        return median(runs.map((run, i) => run[key] / reference[i]![key])).toFixed(2);
      };
      console.log(
        `| ${scenario} | ${server} | ${median(runs.map((r) => r.rps)).toFixed(0)} | ${
          median(runs.map((r) => r.perCpu)).toFixed(0)
        } | ${ratio("deno", "rps")} | ${ratio("deno", "perCpu")} | ${ratio("fastify24", "rps")} | ${
          ratio("fastify24", "perCpu")
        } | ${runs.reduce((n, r) => n + r.errors, 0)} |`,
      );
    }
  }
}

/** The servers that run `scenario`, of the normal and the hot-caller sets. */
type Sets = { normal: Running[]; hot: Running[]; peers: Running[]; hotPeers: Running[] };

/**
 * Starts each Node service as `npm start` runs it once, until its warm-up has written Node's
 * compile cache (`NODE_COMPILE_CACHE`), and stops it: the figures are those of every start after
 * the first after `npm ci`, which alone strips the sources' types (17 MiB more, lib/node/main.ts).
 */
async function prime(): Promise<void> {
  for (const name of ["node24", "node26"]) {
    const service = await start(name);
    while (!service.events.some((e) => /^warmed up/.test(String(e.message)))) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    service.child.kill("SIGTERM");
    await service.child.status;
  }
}

/** Starts every service twice (normal, hot caller), the references and the peers. */
async function startAll(): Promise<{ sets: Sets; refs: Running[] }> {
  await prime();
  const names = Object.keys(SERVICES);
  const normal = await Promise.all(names.map((name) => start(name)));
  const hot = await Promise.all(names.map((name) => start(name, HOT_CALLER_ENV)));
  const node24 = normal.find((s) => s.name === "node24")!.port;
  const refs = await startRefs(await capture(node24));
  const files = { folder: await installPeers(), bodies: await captureBodies(node24) };
  const peers = await Promise.all(PEERS.map((name) => startPeer(name, files, {})));
  const hotPeers = await Promise.all(PEERS.map((name) => startPeer(name, files, HOT_CALLER_ENV)));
  return { sets: { normal, hot, peers, hotPeers }, refs };
}

/** Load: every server, every scenario, interleaved rounds; memory before and after. */
async function load(): Promise<void> {
  const { sets, refs } = await startAll();
  const only = new Set(args.servers.split(",").filter(Boolean));
  const servers = (scenario: Scenario) =>
    [
      ...(scenario.name === "hot" ? sets.hot : sets.normal),
      ...(PEER_SCENARIOS.has(scenario.name)
        ? (scenario.name === "hot" ? sets.hotPeers : sets.peers)
        : []),
      ...(REF_SCENARIOS.has(scenario.name) ? refs : []),
    ].filter((server) => only.size === 0 || only.has(server.name));
  // Warm-up: each service warmed up and every scenario answered once.
  for (const service of [...sets.normal, ...sets.hot]) {
    while (!service.events.some((e) => /^warmed up/.test(String(e.message)))) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  for (const scenario of scenarios) {
    for (const server of servers(scenario)) await wrk(server, scenario, "1");
  }
  const rss = async (set: Running[], key: "rss" | "hwm") =>
    Object.fromEntries(
      await Promise.all(set.map(async (s) => [s.name, (await status(s.pid))[key]] as const)),
    );
  const idle = await rss([...sets.normal, ...sets.peers], "rss");
  const results: Results = {};
  for (let round = 0; round < Number(args.rounds); round++) {
    for (const scenario of scenarios) {
      for (const server of servers(scenario)) {
        ((results[scenario.name] ??= {})[server.name] ??= []).push(await wrk(server, scenario));
      }
    }
  }
  const peak = await rss([...sets.normal, ...sets.peers], "hwm");
  const hotPeak = await rss([...sets.hot, ...sets.hotPeers], "hwm");
  printLoad(results);
  console.log(
    "\n| process | RSS after warm-up (MiB) | peak, JSON + 404 + 429 (MiB) | peak, hot caller (MiB) |",
  );
  console.log("| --- | ---: | ---: | ---: |");
  for (const name of Object.keys(idle)) {
    console.log(
      `| ${name} | ${idle[name]!.toFixed(1)} | ${peak[name]!.toFixed(1)} | ${
        hotPeak[name]!.toFixed(1)
      } |`,
    );
  }
  const all = [...sets.normal, ...sets.hot, ...sets.peers, ...sets.hotPeers, refs[0]!];
  for (const running of all) running.child.kill("SIGTERM");
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

console.log(
  `Node ${NODE[24]} / ${NODE[26]}; Deno ${Deno.version.deno}; npm start: ${JSON.stringify(START)}`,
);
if (!args.dry && Number(args.cold) > 0) await cold();
await load();
Deno.exit(0);
