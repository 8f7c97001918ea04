/**
 * `deno task bench:stores --topology=single,cluster,sentinel`: the Redis store on each topology, in
 * `exact` and `local-first`, with two service processes sharing it (see `stores.ts`). Prints one
 * table row per topology and mode. `cluster-no-replicas` is the cluster's 3 primaries alone, to
 * tell the cost of replication apart. With `--rate=<requests/s>` the pair is offered that rate
 * (wrk's `delay()` per connection) instead of saturating, so that p50 is a request's latency rather
 * than a queue's.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import type { RateLimitPolicy } from "../../lib/limit/core/decision.ts";
import type { LocalFirstStore } from "../../lib/limit/local_first/local_first_store.ts";
import { openRateLimitStore } from "../../lib/limit/open_store.ts";
import { loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import {
  freePort,
  redisCli,
  startCluster,
  startRedis,
  startSentinel,
  waitForPort,
} from "../_redis.ts";

const ROOT = new URL("../../", import.meta.url);

/** The settings of `stores.ts` this part shares. */
export interface TopologyBench {
  duration: number;
  connections: number;
  callers: number;
  policy: RateLimitPolicy;
  wrkScript: string;
  /** The pair's offered requests per second; saturation when undefined. */
  rate?: number | undefined;
}

interface Topology {
  env: Record<string, string>;
  /** Ports of the data nodes whose `commandstats` count the script calls. */
  dataPorts(): Promise<number[]>;
  close(): Promise<void>;
}

async function startTopology(type: string): Promise<Topology> {
  if (type === "cluster" || type === "cluster-no-replicas") {
    const cluster = await startCluster({ replicas: type === "cluster" ? 1 : 0 });
    return {
      env: { REDIS_TYPE: "cluster", REDIS_URL: cluster.urls.join(",") },
      dataPorts: () => Promise.resolve(cluster.urls.map((url) => Number(new URL(url).port))),
      close: () => cluster.close(),
    };
  }
  if (type === "sentinel") {
    const sentinel = await startSentinel();
    return {
      env: {
        REDIS_TYPE: "sentinel",
        REDIS_URL: sentinel.urls.join(","),
        REDIS_SENTINEL_MASTER: sentinel.name,
      },
      dataPorts: async () => [await sentinel.primary()],
      close: () => sentinel.close(),
    };
  }
  const redis = await startRedis();
  return {
    env: { REDIS_URL: redis.url },
    dataPorts: () => Promise.resolve([redis.port]),
    close: () => redis.stop(),
  };
}

async function run(cmd: string[]): Promise<string> {
  const out = await new Deno.Command(cmd[0]!, { args: cmd.slice(1), stdout: "piped" }).output();
  return new TextDecoder().decode(out.stdout);
}

function spawnService(bench: TopologyBench, env: Record<string, string>) {
  const port = freePort();
  const child = new Deno.Command("taskset", {
    args: [
      "-c",
      "0",
      Deno.execPath(),
      "run",
      "--config",
      new URL("deno.json", ROOT).pathname,
      "--allow-net",
      "--allow-read",
      "--allow-env",
      new URL("main.ts", ROOT).pathname,
      "--listen",
    ],
    env: {
      PORT: String(port),
      HOSTNAME: "127.0.0.1",
      ACCESS_LOG: "false",
      TRUSTED_PROXIES: "127.0.0.1",
      RATE_LIMIT: String(bench.policy.limit),
      RATE_LIMIT_WINDOW_SECONDS: String(bench.policy.windowMs / 1000),
      RATE_LIMIT_STORE: "redis",
      RATE_LIMIT_STORE_TIMEOUT_MS: "2000",
      ...env,
    },
    stdout: "null",
    stderr: "inherit",
  }).spawn();
  return { port, child };
}

function parseWrk(text: string) {
  const unit = { us: 0.001, ms: 1, s: 1000 } as const;
  const percentile = (p: number) => {
    const match = new RegExp(String.raw`\s${p}%\s+([\d.]+)(us|ms|s)\b`).exec(text);
    return match ? Number(match[1]) * unit[match[2] as keyof typeof unit] : NaN;
  };
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]),
    requests: Number(/(\d+) requests in/.exec(text)?.[1]),
    p50: percentile(50),
    p99: percentile(99),
    non2xx: Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(text)?.[1] ?? 0),
  };
}

async function scriptCalls(ports: number[]): Promise<number> {
  let calls = 0;
  for (const port of ports) {
    const stats = await run(["redis-cli", "-p", String(port), "info", "commandstats"]);
    for (const match of stats.matchAll(/cmdstat_(eval\w*):calls=(\d+)/g)) calls += Number(match[2]);
  }
  return calls;
}

/** Two service processes on `env`, a `wrk` each: the sum of requests/s, the worse percentiles. */
async function benchPair(bench: TopologyBench, topology: Topology, env: Record<string, string>) {
  const services = [spawnService(bench, env), spawnService(bench, env)];
  const script = await Deno.makeTempFile({ suffix: ".lua" });
  try {
    await Promise.all(services.map((s) => waitForPort(s.port, 20_000)));
    // At a rate: each of a wrk's connections waits its share of the interval before each request.
    const perConnectionMs = bench.rate === undefined
      ? undefined
      : Math.max(1, Math.round((bench.connections * 1000) / bench.rate));
    await Deno.writeTextFile(
      script,
      bench.wrkScript +
        (perConnectionMs === undefined ? "" : `delay = function() return ${perConnectionMs} end\n`),
    );
    const wrk = (port: number, seconds: number) =>
      run([
        ..."taskset -c 1 wrk -t1".split(" "),
        `-c${Math.max(1, bench.connections / 2)}`,
        `-d${seconds}s`,
        "--latency",
        "-s",
        script,
        `http://127.0.0.1:${port}`,
      ]);
    await Promise.all(services.map((s) => wrk(s.port, 2)));
    const ports = await topology.dataPorts();
    await Promise.all(ports.map((port) => redisCli(["-p", String(port), "config", "resetstat"])));
    const runs = (await Promise.all(services.map((s) => wrk(s.port, bench.duration)))).map(
      parseWrk,
    );
    const requests = runs.reduce((sum, r) => sum + r.requests, 0);
    return {
      rps: runs.reduce((sum, r) => sum + r.rps, 0),
      p50: Math.max(...runs.map((r) => r.p50)),
      p99: Math.max(...runs.map((r) => r.p99)),
      non2xx: runs.reduce((sum, r) => sum + r.non2xx, 0),
      callsPerRequest: (await scriptCalls(ports)) / requests,
    };
  } finally {
    await Deno.remove(script).catch(() => {});
    for (const s of services) s.child.kill("SIGTERM");
    await Promise.all(services.map((s) => s.child.status));
  }
}

/**
 * Network round trips per request of two `local-first` stores in this process, by the sync's own
 * counter, over `callers` callers for 3 s at `rate` requests per second (the pair's HTTP rate).
 */
async function localFirstRoundTrips(
  bench: TopologyBench,
  env: Record<string, string>,
  rate: number,
) {
  const loaded = loadConfig(recordEnv({
    RATE_LIMIT: String(bench.policy.limit),
    RATE_LIMIT_STORE: "redis",
    RATE_LIMIT_CONSISTENCY: "local-first",
    ...env,
  }));
  if (!loaded.ok) throw new Error(loaded.errors.join("\n"));
  const stores = await Promise.all(
    [0, 1].map(async () => await openRateLimitStore(loaded.config) as LocalFirstStore),
  );
  let hits = 0;
  const start = Date.now();
  while (Date.now() < start + 3000) {
    // Paced: the hits due by now at `rate`, then the event loop (and the sync loop) runs.
    for (const due = ((Date.now() - start) * rate) / 1000; hits < due; hits++) {
      stores[hits % 2]!.hit(`10.1.${hits % bench.callers}`, Date.now());
    }
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  const trips = stores.reduce((sum, store) => sum + store.stats().roundTrips, 0);
  const syncs = stores.reduce((sum, store) => sum + store.stats().syncs, 0);
  const failed = stores.reduce((sum, store) => sum + store.stats().failedSyncs, 0);
  await Promise.all(stores.map((store) => store.close()));
  return { perRequest: trips / hits, syncsPerRequest: syncs / hits, failed };
}

/** Runs every topology of `types` in both modes and prints the table. */
export async function benchTopologies(types: string[], bench: TopologyBench): Promise<void> {
  const rows: string[] = [];
  for (const type of types) {
    const topology = await startTopology(type);
    try {
      for (const mode of ["exact", "local-first"] as const) {
        const env = { ...topology.env, RATE_LIMIT_CONSISTENCY: mode };
        const r = await benchPair(bench, topology, env);
        const trips = mode === "local-first"
          ? await localFirstRoundTrips(bench, topology.env, r.rps)
          : undefined;
        rows.push(
          `| ${type} | ${mode} | ${Math.round(r.rps)} | ${r.p50.toFixed(2)} ms | ${
            r.p99.toFixed(2)
          } ms | ${r.non2xx} | ${r.callsPerRequest.toFixed(4)} | ${
            trips
              ? `${trips.perRequest.toFixed(4)}${trips.failed ? ` (${trips.failed} failed)` : ""}`
              : "1 (one script per decision)"
          } | ${trips ? trips.syncsPerRequest.toFixed(4) : "1"} |`,
        );
        console.log(rows.at(-1));
      }
    } finally {
      await topology.close();
    }
  }
  console.log(
    `\ntwo service processes on CPU 0, a wrk each on CPU 1 (${
      bench.connections / 2
    } connections), ${bench.duration} s, ${bench.callers} callers, ${
      bench.rate === undefined ? "saturation" : `${bench.rate} requests/s offered`
    }\n`,
  );
  console.log(
    "| type | mode | requests/s (sum) | p50 (worse) | p99 (worse) | non-2xx | script calls per request | round trips per request (one per primary) | waits per request (one per sync) |",
  );
  console.log("|---|---|---:|---:|---:|---:|---:|---:|---:|");
  for (const row of rows) console.log(row);
}
