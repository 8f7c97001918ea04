/**
 * What a hung instance costs its callers through the shipped nginx, and the answer times its
 * timeouts are chosen from (issue 54; deploy/README.md, "When an instance hangs or stops").
 *
 * Run with `deno task bench:hang`. Options: `--hang 30` (seconds an instance stays stopped),
 * `--node` (the Node unit's instances, Node 24 from npm, for the Deno binary's), `--reference
 * <nginx.conf>` (the hang also through that file, in the same run: say the former one, from
 * `git show`), `--runs 3` (fresh instances whose start-up is timed).
 *
 * 1. What answers take, on the recipe's instances reached directly: from the moment one listens
 *    until a second after its warm-up is over, a request every 10 ms, and the longest answer (a
 *    request that waited for a step of the start-up); 16 keep-alive clients, each a caller of its
 *    own, as fast as answered for 10 s over every path and representation: p50, p99, max; a store
 *    that hangs (Redis in `exact`, `RATE_LIMIT_STORE_TIMEOUT_MS` at its default, the Redis
 *    process SIGSTOPped): the longest of 20 answers.
 * 2. The hang: two instances behind real nginx, 16 keep-alive clients each from its own address,
 *    one instance SIGSTOPped for `--hang` seconds: tests/_hang.ts's findings, for the shipped file
 *    and the reference. Only figures of one run side by side mean something on a shared machine.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { hangFindings, hangUnderLoad } from "../_hang.ts";
import { connectFrom, exchange, getHead, keepAliveLoad } from "../_keep_alive_load.ts";
import { hangTimeouts, startNginx } from "../_nginx.ts";
import { nodeBinary } from "../_node.ts";
import { startInstance, warmedUp } from "../_recipe.ts";
import { freePort, redisCli, startRedis } from "../_redis.ts";
import type { ServiceProcess } from "../_service_process.ts";

/** A limit no client of the benchmark reaches: every answer of a healthy instance is a 200. */
const OPERATOR_ENV = { RATE_LIMIT: "1000000" };
/** Keep-alive clients: issue 54's check. */
const CLIENTS = 16;
/** How long the loaded instance is timed. */
const LOAD_MS = 10_000;
/** The start-up's requests: one every so many ms, on one connection. */
const START_POLL_MS = 10;
/** Requests to the instance whose store hangs. */
const STALLED_STORE_REQUESTS = 20;
/** The requests of the loaded instance, in turn: every path, representation and coding. */
const MIXED = [
  getHead("/api/v1/platform", "Accept-Encoding: br"),
  getHead("/developers", "Accept-Encoding: gzip"),
  getHead("/", "Accept: text/markdown"),
  getHead("/openapi.json", "Accept-Encoding: br"),
  getHead("/llms.txt"),
  getHead("/developers/deprecation-policy.md"),
];

/** Parsed command line. */
interface Options {
  hangS: number;
  node: string | undefined;
  reference: string | undefined;
  runs: number;
}

async function parseOptions(args: readonly string[]): Promise<Options> {
  const options: Options = { hangS: 30, node: undefined, reference: undefined, runs: 3 };
  for (let i = 0; i < args.length; i++) {
    const value = args[i + 1];
    if (args[i] === "--hang" && value !== undefined) options.hangS = Number(args[++i]);
    else if (args[i] === "--runs" && value !== undefined) options.runs = Number(args[++i]);
    else if (args[i] === "--reference" && value !== undefined) options.reference = args[++i];
    else if (args[i] === "--node") options.node = await nodeBinary(24);
    else if (args[i] !== "--") {
      throw new Error(`unknown argument ${args[i]}: use --hang S, --node, --reference F, --runs N`);
    }
  }
  return options;
}

/** An instance of the recipe with its own state folder, which `stop` removes. */
async function instance(options: Options, env: Record<string, string> = {}) {
  const stateDir = Deno.makeTempDirSync();
  const port = freePort();
  const process = await startInstance(port, stateDir, {
    env: { ...OPERATOR_ENV, ...env },
    ...options.node === undefined ? {} : { node: options.node },
  });
  const stop = async () => {
    await process.stop();
    Deno.removeSync(stateDir, { recursive: true });
  };
  return { port, process, stop };
}

/** The longest answer from the moment a fresh instance listens until 1 s after its warm-up. */
async function startUpLongest(options: Options): Promise<number> {
  const { port, process, stop } = await instance(options);
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  let longest = 0;
  let warm: number | undefined;
  const warming = warmedUp(process).then(() => warm = performance.now());
  try {
    while (warm === undefined || performance.now() - warm < 1000) {
      const started = performance.now();
      await exchange(conn, getHead("/api/v1/platform"));
      longest = Math.max(longest, performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, START_POLL_MS));
    }
  } finally {
    conn.close();
    await warming.catch(() => {});
    await stop();
  }
  return longest;
}

/** p50, p99 and max of every request of 16 callers to one warm instance, as fast as answered. */
async function loaded(options: Options): Promise<{ p50: number; p99: number; max: number }> {
  const { port, process, stop } = await instance(options);
  const times: number[] = [];
  try {
    await warmedUp(process);
    await keepAliveLoad({
      port,
      connections: CLIENTS,
      until: new Promise((resolve) => setTimeout(resolve, LOAD_MS)),
      request: (n) => MIXED[n % MIXED.length]!,
      connect: (worker) => connectFrom(port, `127.0.54.${worker + 1}`),
      onRequest: (request) => times.push(request.ms),
    });
  } finally {
    await stop();
  }
  times.sort((a, b) => a - b);
  const at = (q: number) => times[Math.min(times.length - 1, Math.floor(times.length * q))]!;
  return { p50: at(0.5), p99: at(0.99), max: times.at(-1)! };
}

/** The longest of 20 answers of an instance in `exact` whose Redis is SIGSTOPped. */
async function stalledStoreLongest(options: Options): Promise<number> {
  const redis = await startRedis();
  const pid = Number(
    /process_id:(\d+)/.exec(await redisCli(["-p", String(redis.port), "info"]))![1],
  );
  const env = { RATE_LIMIT_STORE: "redis", REDIS_URL: redis.url, RATE_LIMIT_CONSISTENCY: "exact" };
  const { port, stop } = await instance(options, env);
  let longest = 0;
  try {
    Deno.kill(pid, "SIGSTOP");
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    for (let i = 0; i < STALLED_STORE_REQUESTS; i++) {
      const started = performance.now();
      await exchange(conn, getHead("/api/v1/platform"));
      longest = Math.max(longest, performance.now() - started);
    }
    conn.close();
  } finally {
    Deno.kill(pid, "SIGCONT");
    await stop();
    await redis.stop();
  }
  return longest;
}

/** The hang through nginx from `conf` (the shipped file when undefined), its findings. */
async function hang(options: Options, conf: string | undefined) {
  const stateDir = Deno.makeTempDirSync();
  const ports: [number, number] = [freePort(), freePort()];
  const instances: ServiceProcess[] = [];
  const runtime = options.node === undefined ? {} : { node: options.node };
  for (const port of ports) {
    instances.push(await startInstance(port, stateDir, { env: OPERATOR_ENV, ...runtime }));
  }
  for (const started of instances) await warmedUp(started);
  const nginx = await startNginx(ports, { accessLog: true, ...conf === undefined ? {} : { conf } });
  const timeouts = hangTimeouts(conf);
  try {
    const run = await hangUnderLoad({
      nginx,
      hung: { port: ports[0], kill: (signal) => instances[0]!.kill(signal) },
      hangMs: options.hangS * 1000,
      clients: CLIENTS,
      answersBefore: 200,
      returnWithinMs: (timeouts.failTimeoutMs ?? 0) + timeouts.readTimeoutMs + 5000,
    });
    return hangFindings(run, {
      lateFromMs: options.hangS * 500,
      readTimeoutMs: timeouts.readTimeoutMs,
    });
  } finally {
    await nginx.stop();
    for (const started of instances) await started.stop();
    Deno.removeSync(stateDir, { recursive: true });
  }
}

const options = await parseOptions(Deno.args);
const runtime = options.node === undefined ? "Deno (deno run with the binary's flags)" : "Node 24";
console.log(`instances: ${runtime}; load average ${Deno.loadavg().join(", ")} (1, 5, 15 min)`);
const starts: number[] = [];
for (let run = 0; run < options.runs; run++) starts.push(await startUpLongest(options));
console.log(`start-up, longest answer (ms): ${starts.map(Math.round).join(", ")}`);
const load = await loaded(options);
console.log(
  `${CLIENTS} clients for ${LOAD_MS / 1000} s (ms): p50 ${load.p50.toFixed(1)}, p99 ${
    load.p99.toFixed(1)
  }, max ${load.max.toFixed(1)}`,
);
console.log(
  `store stopped, longest answer (ms): ${Math.round(await stalledStoreLongest(options))}`,
);
const confs: [string, string | undefined][] = [["deploy/nginx.conf", undefined]];
if (options.reference !== undefined) {
  confs.push([options.reference, Deno.readTextFileSync(options.reference)]);
}
for (const [name, conf] of confs) {
  console.log(
    `hang ${options.hangS} s through ${name}:`,
    JSON.stringify(await hang(options, conf)),
  );
}
