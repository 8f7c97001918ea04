/**
 * One refused caller hammering on 64 connections (`deno task bench:refused`): the store calls one
 * isolate or instance makes for it, with the shipped refusal memo (a hold of 2 to 3 s, the
 * requests of a likely refused caller waiting for its one call in flight) beside two references in
 * the same run, alternated round by round: `before`, the memo as it was before issue 54 (a refusal
 * held to its end, no waiting), and `unmerged` (the shipped hold, no waiting).
 *
 * - workerd: the test Worker (`tests/workers/_limiter_worker.ts`) on real workerd through miniflare,
 *   each caller's own Durable Object; the isolate's `hit` calls to the caller's object, as the
 *   Worker counts them (`/calls`).
 * - Redis: a real `redis-server` and a `RedisStore` under a `GuardedStore` (the store path of
 *   `RATE_LIMIT_STORE=redis` in `exact`) behind `Deno.serve` in this process, answering 200 or 429;
 *   the hit scripts Redis ran (`INFO commandstats`).
 *
 * Each run: a fresh caller at limit 60 is refused first (60 requests and one more, one after
 * another), then `wrk -t1 -c64` hammers it for `--duration` seconds (pinned to CPU 1 when `taskset`
 * is there). Two windows: 60 s (the default; the run lies inside one refusal, so only holds end)
 * and 5 s (the refusal ends every few seconds and the caller is admitted again: the herd at the
 * reset). Prints a Markdown table. Bounded: `--rounds` (at most 5) x `--duration` (at most 20 s)
 * per row; 127.0.0.1 only.
 *
 * @module
 */
// deno-lint-ignore-file no-console -- a benchmark's report

import { parseArgs } from "node:util";
import { GuardedStore, type GuardOptions } from "../../lib/limit/guard/guarded_store.ts";
import { openRedisStore } from "../../lib/limit/redis/redis_store.ts";
import type { RateLimitPolicy } from "../../lib/limit/core/decision.ts";
import { redisCli, startRedis } from "../_redis.ts";
import { buildLimiterWorker, getJson, startLimiterWorkerd } from "../workers/_limiter_workerd.ts";
import { ROOT } from "../_deno_info.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    rounds: { type: "string", default: "2" },
    duration: { type: "string", default: "10" },
  },
});
const ROUNDS = Math.min(5, Math.max(1, Number(values.rounds)));
const DURATION = Math.min(20, Math.max(1, Number(values.duration)));
/** The hammer's connections: a client library's pool, a load tester's default order. */
const CONNECTIONS = 64;
/** The limit: the default's, so the caller is refused after its first 60. */
const LIMIT = 60;
/** The windows measured, in seconds: the default, and one short enough to end within a run. */
const WINDOWS = [60, 5];
/** The guards compared, in the order each round runs them. */
const VARIANTS = ["before", "unmerged", "shipped"] as const;
type Variant = typeof VARIANTS[number];

/** What one run measured. */
interface Run {
  calls: number;
  admitted: number;
  refused: number;
  other: number;
}

/** `wrk` hammering `url` on `CONNECTIONS` connections, its answers counted by status. */
async function hammer(url: string): Promise<Omit<Run, "calls">> {
  const wrk = ["wrk", "-t1", `-c${CONNECTIONS}`, `-d${DURATION}s`, "-s"];
  const args = [...wrk, `${ROOT}/tests/bench/hammer.lua`, url, "--", "198.18.0.1"];
  const pinned = await hasTaskset() ? ["taskset", "-c", "1", ...args] : args;
  const out = await new Deno.Command(pinned[0]!, { args: pinned.slice(1), stdout: "piped" })
    .output();
  const text = new TextDecoder().decode(out.stdout);
  const counts = /hammer admitted=(\d+) refused=(\d+) other=(\d+)/.exec(text);
  if (counts === null) throw new Error(`wrk: ${text}`);
  return { admitted: Number(counts[1]), refused: Number(counts[2]), other: Number(counts[3]) };
}

let taskset: boolean | undefined;
async function hasTaskset(): Promise<boolean> {
  taskset ??= await new Deno.Command("taskset", { args: ["-c", "1", "true"] }).output()
    .then((out) => out.success, () => false);
  return taskset;
}

/** The guard options of `variant` (the shipped ones are the defaults). */
function variantOptions(variant: Variant, policy: RateLimitPolicy): Partial<GuardOptions> {
  if (variant === "before") {
    return { mergeInFlight: false, memo: { holdMs: policy.windowMs, spreadMs: 0 } };
  }
  return variant === "unmerged" ? { mergeInFlight: false } : {};
}

/** The rows of one window on workerd: `ROUNDS` runs of each variant. */
async function onWorkerd(window: number, script: string): Promise<Map<Variant, Run[]>> {
  const persist = await Deno.makeTempDir({ prefix: "bench-refused-" });
  const workerd = await startLimiterWorkerd({
    script,
    persist,
    limit: LIMIT,
    windowSeconds: window,
  });
  const runs = new Map<Variant, Run[]>(VARIANTS.map((v) => [v, []]));
  try {
    const url = workerd.urls[0]!;
    for (let round = 0; round < ROUNDS; round++) {
      for (const variant of VARIANTS) {
        const path = `/hit?key=w${window}.${round}.${variant}&memo=${variant}&status=1`;
        for (let i = 0; i <= LIMIT; i++) await (await fetch(new URL(path, url))).body?.cancel();
        const calls = async () =>
          (await getJson<{ calls: number }>(url, `/calls?key=w${window}.${round}.${variant}`))
            .calls;
        const before = await calls();
        const answered = await hammer(new URL(path, url).href);
        runs.get(variant)!.push({ ...answered, calls: await calls() - before });
      }
    }
  } finally {
    await workerd.dispose();
    await Deno.remove(persist, { recursive: true });
  }
  return runs;
}

/** Hit scripts Redis ran so far. */
async function hitScripts(port: number): Promise<number> {
  const info = await redisCli(["-p", String(port), "INFO", "commandstats"]);
  const calls = (name: string) =>
    Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
  return calls("evalsha") + calls("eval");
}

/** The rows of one window with Redis: `ROUNDS` runs of each variant. */
async function onRedis(window: number): Promise<Map<Variant, Run[]>> {
  const redis = await startRedis();
  const policy = { limit: LIMIT, windowMs: window * 1000 };
  const store = await openRedisStore(redis.url, policy);
  const guards = new Map(VARIANTS.map((variant) => [
    variant,
    new GuardedStore(store, {
      policy,
      timeoutMs: 1000,
      onError: "open",
      ...variantOptions(variant, policy),
    }),
  ]));
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (request) => {
    const url = new URL(request.url);
    const guard = guards.get(url.searchParams.get("memo") as Variant)!;
    const decision = await guard.hit(url.searchParams.get("key")!, Date.now());
    return new Response(null, { status: decision.allowed ? 200 : 429 });
  });
  const runs = new Map<Variant, Run[]>(VARIANTS.map((v) => [v, []]));
  try {
    const base = `http://127.0.0.1:${server.addr.port}`;
    for (let round = 0; round < ROUNDS; round++) {
      for (const variant of VARIANTS) {
        const url = `${base}/hit?key=r${window}.${round}.${variant}&memo=${variant}`;
        for (let i = 0; i <= LIMIT; i++) await (await fetch(url)).body?.cancel();
        const before = await hitScripts(redis.port);
        const answered = await hammer(url);
        runs.get(variant)!.push({ ...answered, calls: await hitScripts(redis.port) - before });
      }
    }
  } finally {
    await server.shutdown();
    await store.close();
    await redis.stop();
  }
  return runs;
}

/** Prints the rows of `store` and `window`, each variant's runs in round order. */
function report(store: string, window: number, runs: Map<Variant, Run[]>): void {
  const shipped = runs.get("shipped")!;
  for (const [variant, list] of runs) {
    const calls = list.map((r) => r.calls).join(", ");
    const ratio = list.map((r, i) => (r.calls / Math.max(1, shipped[i]!.calls)).toFixed(1))
      .join(", ");
    const answered = list.map((r) => `${r.admitted}/${r.refused + r.admitted + r.other}`)
      .join(", ");
    console.log(`| ${store} | ${window} s | ${variant} | ${calls} | ${ratio} | ${answered} |`);
  }
}

const script = await buildLimiterWorker();
console.log(
  `One refused caller, limit ${LIMIT}, wrk -c${CONNECTIONS} for ${DURATION} s per run, ${ROUNDS} rounds`,
);
console.log(
  "| store | window | memo | store calls per run | ÷ shipped | admitted / answered |",
);
console.log("| --- | --- | --- | --- | --- | --- |");
for (const window of WINDOWS) report("workerd", window, await onWorkerd(window, script));
for (const window of WINDOWS) report("Redis", window, await onRedis(window));
