/**
 * Benchmark of the rate-limit stores in one run: requests per second and p99 latency of the real
 * service on the memory, Deno KV and Redis stores, and the store round trips each request costs.
 *
 * The service is pinned to CPU 0 and `wrk` to CPU 1 (`taskset`), so the two do not compete. 5,000
 * callers (`X-Forwarded-For` from a trusted 127.0.0.1) share a limit high enough that every request
 * is admitted: the benchmark measures the cost of counting, not of refusing. Round trips per request
 * are counted twice for Redis (the store's own counter in a direct run, and Redis `commandstats` for
 * the HTTP run) and by the store's counter for KV.
 *
 * KV and Redis run twice: `RATE_LIMIT_CONSISTENCY=exact` and `local-first`.
 *
 * Run: `deno task bench:stores` (needs wrk, taskset and redis-server; about 70 seconds). Options:
 * `--duration=8` seconds per store, `--connections=32`.
 *
 * `--topology=single,cluster,sentinel` runs instead the Redis store on those topologies (a 6-node
 * cluster of 3 primaries; a primary, a replica and three sentinels), `exact` and `local-first`, with
 * two service processes (both on CPU 0, a `wrk` each on CPU 1 with half the connections): their
 * requests per second summed, the worse p50 and p99, the script calls per request by the primaries'
 * `commandstats`, and for `local-first` the network round trips per request by the sync's own
 * counter (one per primary per sync: the slot groups of one primary are pipelined), measured by two
 * stores in this process over the same callers. `--topology=cluster-no-replicas` runs the cluster's
 * primaries alone; `--rate=2000` offers the pair that many requests per second instead of saturating.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { parseArgs } from "node:util";
import type { RateLimitPolicy, RateLimitStore } from "../../lib/limit/core/decision.ts";
import { KvStore } from "../../lib/limit/kv/kv_store.ts";
import { openRedisStore } from "../../lib/limit/redis/redis_store.ts";
import { freePort, startRedis, type TestRedis, waitForPort } from "../_redis.ts";
import { benchTopologies } from "./_topologies.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    duration: { type: "string", default: "8" },
    connections: { type: "string", default: "32" },
    topology: { type: "string" },
    rate: { type: "string" },
  },
});
const DURATION = Number(values.duration);
const CONNECTIONS = Number(values.connections);
const CALLERS = 5000;
const POLICY: RateLimitPolicy = { limit: 1000, windowMs: 60_000 };
const ROOT = new URL("../../", import.meta.url);

const WRK_SCRIPT = `
local n = 0
request = function()
  n = n + 1
  local c = math.random(0, ${CALLERS - 1})
  local ip = "10.0." .. math.floor(c / 250) .. "." .. (c % 250 + 1)
  return wrk.format("GET", "/api/v1/platform", { ["X-Forwarded-For"] = ip, ["Accept-Encoding"] = "br" })
end
`;

interface Result {
  store: string;
  rps: number;
  p50ms: number;
  p99ms: number;
  errors: string;
  roundTripsPerRequest: string;
}

async function run(cmd: string[], env: Record<string, string> = {}): Promise<string> {
  const out = await new Deno.Command(cmd[0]!, {
    args: cmd.slice(1),
    env,
    stdout: "piped",
    stderr: "piped",
  })
    .output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(`${cmd.join(" ")} failed:\n${text}${new TextDecoder().decode(out.stderr)}`);
  }
  return text;
}

function parseWrk(text: string): { rps: number; p50ms: number; p99ms: number; errors: string } {
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]);
  const unit = { us: 0.001, ms: 1, s: 1000 } as const;
  const percentile = (p: number) => {
    const match = new RegExp(String.raw`\s${p}%\s+([\d.]+)(us|ms|s)\b`).exec(text);
    return match ? Number(match[1]) * unit[match[2] as keyof typeof unit] : NaN;
  };
  const p50ms = percentile(50);
  const p99ms = percentile(99);
  const non2xx = /Non-2xx or 3xx responses:\s+(\d+)/.exec(text)?.[1] ?? "0";
  const socket = /Socket errors:[^\n]*/.exec(text)?.[0] ?? "";
  return { rps, p50ms, p99ms, errors: `${non2xx} non-2xx${socket ? `; ${socket}` : ""}` };
}

async function commandCalls(redis: TestRedis): Promise<number> {
  const stats = await run(["redis-cli", "-p", String(redis.port), "info", "commandstats"]);
  let calls = 0;
  for (const match of stats.matchAll(/cmdstat_(eval\w*):calls=(\d+)/g)) calls += Number(match[2]);
  return calls;
}

async function benchHttp(
  store: string,
  env: Record<string, string>,
  afterWarmup: () => Promise<unknown> = () => Promise.resolve(),
): Promise<Omit<Result, "roundTripsPerRequest"> & { requests: number }> {
  const port = freePort();
  const service = new Deno.Command("taskset", {
    args: [
      "-c",
      "0",
      Deno.execPath(),
      "run",
      "--config",
      new URL("deno.json", ROOT).pathname,
      "--allow-net",
      "--allow-read",
      "--allow-write",
      "--allow-env",
      new URL("main.ts", ROOT).pathname,
      "--listen",
    ],
    env: {
      PORT: String(port),
      HOSTNAME: "127.0.0.1",
      ACCESS_LOG: "false",
      TRUSTED_PROXIES: "127.0.0.1",
      RATE_LIMIT: String(POLICY.limit),
      RATE_LIMIT_WINDOW_SECONDS: String(POLICY.windowMs / 1000),
      RATE_LIMIT_STORE: store,
      // A saturated service delays its own store calls; measure the store, not the failure policy.
      RATE_LIMIT_STORE_TIMEOUT_MS: "2000",
      ...env,
    },
    stdout: "null",
    stderr: "inherit",
  }).spawn();
  try {
    await waitForPort(port, 20_000);
    const script = await Deno.makeTempFile({ suffix: ".lua" });
    await Deno.writeTextFile(script, WRK_SCRIPT);
    const url = `http://127.0.0.1:${port}`;
    const wrk = (seconds: number) =>
      run([
        "taskset",
        "-c",
        "1",
        "wrk",
        "-t1",
        `-c${CONNECTIONS}`,
        `-d${seconds}s`,
        "--latency",
        "-s",
        script,
        url,
      ]);
    await wrk(2); // warm-up: JIT, connections, first callers
    await afterWarmup();
    const text = await wrk(DURATION);
    await Deno.remove(script);
    const parsed = parseWrk(text);
    const requests = Number(/(\d+) requests in/.exec(text)?.[1]);
    return { store, ...parsed, requests };
  } finally {
    service.kill("SIGTERM");
    await service.status;
  }
}

/** Round trips per decision counted by the store itself over `n` hits on `CALLERS` callers. */
async function directRoundTrips(
  store: RateLimitStore & { stats(): { roundTrips: number } },
  n = 5000,
) {
  const now = Date.now();
  for (let i = 0; i < n; i++) await store.hit(`c${i % CALLERS}`, now + i);
  return store.stats().roundTrips / n;
}

if (values.topology !== undefined) {
  await benchTopologies(values.topology.split(","), {
    duration: DURATION,
    connections: CONNECTIONS,
    callers: CALLERS,
    policy: POLICY,
    wrkScript: WRK_SCRIPT,
    rate: values.rate === undefined ? undefined : Number(values.rate),
  });
  Deno.exit(0);
}

const results: Result[] = [];

{
  const memory = await benchHttp("memory", {});
  results.push({ ...memory, roundTripsPerRequest: "0 (in process)" });
}

{
  const dir = await Deno.makeTempDir();
  const kv = await benchHttp("kv", { KV_PATH: `${dir}/bench.sqlite3` });
  const direct = new KvStore(await Deno.openKv(`${dir}/direct.sqlite3`), POLICY, { ownsKv: true });
  const perHit = await directRoundTrips(direct);
  direct.close();
  results.push({ ...kv, roundTripsPerRequest: `${perHit.toFixed(2)} (get + atomic commit)` });
  const local = await benchHttp("kv", {
    KV_PATH: `${dir}/local.sqlite3`,
    RATE_LIMIT_CONSISTENCY: "local-first",
  });
  await Deno.remove(dir, { recursive: true });
  results.push({
    ...local,
    store: "kv local-first",
    roundTripsPerRequest:
      "not counted here (one exchange with the hit log per sync, whatever the callers)",
  });
}

{
  const redis = await startRedis();
  try {
    const http = await benchHttp(
      "redis",
      { REDIS_URL: redis.url },
      () => run(["redis-cli", "-p", String(redis.port), "config", "resetstat"]),
    );
    const calls = await commandCalls(redis);
    const local = await benchHttp(
      "redis",
      { REDIS_URL: redis.url, RATE_LIMIT_CONSISTENCY: "local-first" },
      () => run(["redis-cli", "-p", String(redis.port), "config", "resetstat"]),
    );
    const localCalls = await commandCalls(redis);
    results.push({
      ...local,
      store: "redis local-first",
      roundTripsPerRequest: `${
        (localCalls / local.requests).toFixed(4)
      } by commandstats (${localCalls} EVAL for ${local.requests} requests)`,
    });
    const direct = await openRedisStore(redis.url, POLICY, { prefix: "direct:" });
    const perHit = await directRoundTrips(direct);
    await direct.close();
    results.push({
      ...http,
      roundTripsPerRequest: `${perHit.toFixed(2)} (store counter); ${
        (calls / http.requests).toFixed(3)
      } by commandstats (${calls} EVAL/EVALSHA for ${http.requests} requests)`,
    });
  } finally {
    await redis.stop();
  }
}

console.log(
  `\n${CONNECTIONS} connections, ${DURATION} s per store, ${CALLERS} callers, service on CPU 0, wrk on CPU 1\n`,
);
console.log("| store | requests/s | p50 | p99 | errors | store round trips per request |");
console.log("|---|---:|---:|---:|---|---|");
for (const r of results) {
  console.log(
    `| ${r.store} | ${Math.round(r.rps)} | ${r.p50ms.toFixed(2)} ms | ${
      r.p99ms.toFixed(2)
    } ms | ${r.errors} | ${r.roundTripsPerRequest} |`,
  );
}
