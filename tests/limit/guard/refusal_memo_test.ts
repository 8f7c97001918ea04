/**
 * Refusals answered from memory (`lib/limit/guard/refusal_memo.ts`, in `GuardedStore`): a caller an
 * `exact` store refused is refused again with the store's own fields and no store call until its
 * oldest counted hit leaves the window, never longer; bounded. Against an exact sliding log with
 * test clocks (the fields compared with the store's own peek at several instants, the edge at the
 * exact reset instant), against a real Redis (no command until the reset: `INFO commandstats`) and
 * a Deno KV file.
 *
 * @module
 */

import assert from "node:assert/strict";
import type {
  Decision,
  RateLimitPolicy,
  RateLimitStore,
} from "../../../lib/limit/core/decision.ts";
import { CallerLogs } from "../../../lib/limit/durable_object/object_logs.ts";
import { GuardedStore } from "../../../lib/limit/guard/guarded_store.ts";
import { MAX_REFUSALS, RefusalMemo } from "../../../lib/limit/guard/refusal_memo.ts";
import { openRateLimitStore } from "../../../lib/limit/open_store.ts";
import { loadConfig, recordEnv } from "../../../lib/config.ts";
import { redisCli, redisUnavailableReason, startRedis } from "../../_redis.ts";
import { openRedisStore } from "../../../lib/limit/redis/redis_store.ts";

const POLICY: RateLimitPolicy = { limit: 60, windowMs: 60_000 };
const T0 = 1_800_000_000_000;

/**
 * An exact store deciding by its own clock (`storeNow`, as Redis and a Durable Object do), its
 * answers arriving `rttMs` after the call (the steady clock moved on meanwhile); counts its calls.
 */
class ClockedStore implements RateLimitStore {
  readonly logs = new CallerLogs();
  calls = 0;
  storeNow = T0;
  hit(key: string): Decision {
    this.calls++;
    return this.logs.hit(key, this.storeNow, POLICY).decision;
  }
  peek(key: string): Decision {
    return this.logs.peek(key, this.storeNow, POLICY);
  }
  close(): void {}
}

function memoized() {
  const store = new ClockedStore();
  let steady = 0;
  const guard = new GuardedStore(store, {
    policy: POLICY,
    timeoutMs: 100,
    onError: "open",
    steadyClock: () => steady,
  });
  /** Moves both clocks to `ms` after the start (the store's ahead by `skewMs`). */
  const at = (ms: number, skewMs = 0) => {
    steady = ms;
    store.storeNow = T0 + ms + skewMs;
  };
  return { store, guard, at };
}

const fields = (d: Decision) => ({
  allowed: d.allowed,
  remaining: d.remaining,
  resetSeconds: d.resetSeconds,
});

Deno.test("a refused caller is answered from memory with the store's own fields at every instant, until the exact instant its oldest hit leaves the window", async () => {
  const { store, guard, at } = memoized();
  for (let i = 0; i < 60; i++) assert.equal((await guard.hit("192.0.2.1", 0)).allowed, true);
  at(250); // the refusal comes 250 ms after the first hit
  const refused = await guard.hit("192.0.2.1", 0);
  assert.deepEqual(fields(refused), { allowed: false, remaining: 0, resetSeconds: 60 });
  assert.equal(store.calls, 61);
  for (const ms of [251, 999, 1000, 1001, 30_250, 58_999, 59_000, 59_001, 59_998, 59_999]) {
    at(ms);
    const memo = await guard.hit("192.0.2.1", 0);
    assert.deepEqual(fields(memo), fields(store.peek("192.0.2.1")), `at ${ms} ms`);
    assert.equal(memo.allowed, false);
  }
  assert.equal(store.calls, 61, "no store call while the refusal holds");
  assert.equal(guard.answeredFromMemory, 10);
  // The exact instant the oldest hit leaves the window: the store is asked, and admits.
  at(60_000);
  const again = await guard.hit("192.0.2.1", 0);
  assert.equal(store.calls, 62);
  assert.equal(again.allowed, true);
});

Deno.test("the memo never refuses longer than the store: it counts from when the call was sent, not from when the store decided", async () => {
  const { store, guard, at } = memoized();
  for (let i = 0; i < 60; i++) await guard.hit("192.0.2.2", 0);
  // Sent at steady 10,000; the store decided 400 ms later by its clock (a slow round trip).
  at(10_000, 400);
  assert.equal((await guard.hit("192.0.2.2", 0)).allowed, false);
  at(59_599, 0);
  assert.equal((await guard.hit("192.0.2.2", 0)).allowed, false);
  assert.equal(store.calls, 61);
  // 49,600 ms after it was sent: the memo is over, 400 ms before the store's refusal is.
  at(59_600, 0);
  assert.equal((await guard.hit("192.0.2.2", 0)).allowed, false);
  assert.equal(store.calls, 62, "asked again: the store still refuses, and says for how long");
  at(60_000, 0);
  assert.equal((await guard.hit("192.0.2.2", 0)).allowed, true);
});

Deno.test("the failure policy's refusals and admissions are never remembered", async () => {
  const failing: RateLimitStore = {
    hit: () => Promise.reject(new Error("down")),
    peek: () => Promise.reject(new Error("down")),
    close() {},
  };
  let calls = 0;
  const counted: RateLimitStore = {
    hit: (...args) => (calls++, failing.hit(...args)),
    peek: failing.peek,
    close() {},
  };
  const guard = new GuardedStore(counted, {
    policy: POLICY,
    timeoutMs: 100,
    onError: "closed",
    breaker: { minFailures: 1000 },
  });
  for (let i = 0; i < 3; i++) assert.equal((await guard.hit("192.0.2.3", 0)).unavailable, true);
  assert.equal(calls, 3);
  assert.equal(guard.answeredFromMemory, 0);
});

Deno.test(`the memo holds at most ${MAX_REFUSALS} callers: a spray of refused callers evicts the oldest`, () => {
  const memo = new RefusalMemo();
  const refusal = (ms: number) =>
    Object.defineProperty({ allowed: false, remaining: 0, resetSeconds: 60 }, "resetMs", {
      value: ms,
    }) as Decision;
  for (let i = 0; i < MAX_REFUSALS + 5000; i++) memo.remember(`10.0.${i}`, 0, refusal(59_000));
  assert.equal(memo.size, MAX_REFUSALS);
  assert.equal(memo.recall("10.0.0", 1), undefined, "the first ones were evicted");
  assert.equal(memo.recall(`10.0.${MAX_REFUSALS + 4999}`, 1)?.allowed, false);
  // A refusal without its exact reset, or of no length, is not kept.
  memo.remember("a", 0, { allowed: false, remaining: 0, resetSeconds: 1 });
  memo.remember("b", 0, refusal(0));
  assert.equal(memo.recall("a", 0), undefined);
  assert.equal(memo.recall("b", 0), undefined);
});

Deno.test("a decision copied by whatever wraps the store (a spread, a structured clone, JSON) still feeds the memo", async () => {
  const copies: Array<[string, (d: Decision) => Decision]> = [
    ["spread", (d) => ({ ...d })],
    ["structuredClone", (d) => structuredClone(d)],
    ["JSON", (d) => JSON.parse(JSON.stringify(d))],
  ];
  for (const [name, copy] of copies) {
    const store = new ClockedStore();
    const copying: RateLimitStore = {
      hit: (key) => copy(store.hit(key)),
      peek: (key) => copy(store.peek(key)),
      close() {},
    };
    const guard = new GuardedStore(copying, { policy: POLICY, timeoutMs: 100, onError: "open" });
    for (let i = 0; i < 61; i++) await guard.hit("192.0.2.7", 0);
    for (let i = 0; i < 100; i++) assert.equal((await guard.hit("192.0.2.7", 0)).allowed, false);
    assert.equal(store.calls, 61, `${name}: the refusal answered from memory`);
    assert.equal(guard.answeredFromMemory, 100, name);
  }
});

const skip = redisUnavailableReason();

/**
 * Scripts Redis ran so far, from `INFO commandstats`: the hit script (`EVALSHA`, or `EVAL` the first
 * time) and the peek script (`EVALSHA_RO`, `EVAL_RO`). (The commands a script runs are counted
 * too, under their own names: not these.)
 */
async function scriptCalls(port: number): Promise<{ hit: number; peek: number }> {
  const info = await redisCli(["-p", String(port), "INFO", "commandstats"]);
  const calls = (name: string) =>
    Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
  return { hit: calls("evalsha") + calls("eval"), peek: calls("evalsha_ro") + calls("eval_ro") };
}

function configOf(env: Record<string, string>) {
  const result = loadConfig(recordEnv(env));
  if (!result.ok) throw new Error(result.errors.join("; "));
  return result.config;
}

Deno.test({
  name:
    `Redis, exact: a caller refused at one instance costs no Redis command until its reset, and the memo's fields are Redis's${
      skip ? ` (skipped: ${skip})` : ""
    }`,
  ignore: skip !== undefined,
  async fn() {
    const redis = await startRedis();
    const config = configOf({
      RATE_LIMIT_STORE: "redis",
      REDIS_URL: redis.url,
      RATE_LIMIT: "3",
      RATE_LIMIT_WINDOW_SECONDS: "2",
    });
    const store = await openRateLimitStore(config);
    const reference = await openRedisStore(redis.url, { limit: 3, windowMs: 2000 });
    try {
      const key = "192.0.2.10";
      for (let i = 0; i < 3; i++) assert.equal((await store.hit(key, Date.now())).allowed, true);
      const refusedAt = performance.now();
      const refused = await store.hit(key, Date.now());
      assert.equal(refused.allowed, false);
      assert.ok(refused.resetMs! > 1000 && refused.resetMs! <= 2000, `${refused.resetMs} ms`);
      await reference.peek(key, Date.now()); // its script loaded (NOSCRIPT, then EVAL_RO) before counting
      const before = await scriptCalls(redis.port);
      let hits = 0;
      let compared = 0;
      // Until shortly before the refusal ends (2 s after the first hit, by Redis's clock).
      while (performance.now() - refusedAt < refused.resetMs! - 300) {
        const p1 = await reference.peek(key, Date.now());
        const memo = await store.hit(key, Date.now());
        const p2 = await reference.peek(key, Date.now());
        compared++;
        assert.equal(memo.allowed, false);
        assert.equal(memo.remaining, 0);
        assert.equal(p1.allowed, false, "Redis refuses it too");
        assert.ok(
          [p1.resetSeconds, p2.resetSeconds].includes(memo.resetSeconds),
          `memo ${memo.resetSeconds} s, Redis ${p1.resetSeconds}-${p2.resetSeconds} s`,
        );
        for (let i = 0; i < 50; i++) (await store.hit(key, Date.now())).allowed || hits++;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const after = await scriptCalls(redis.port);
      assert.equal(after.hit - before.hit, 0, "not one hit reached Redis");
      assert.equal(after.peek - before.peek, 2 * compared, "the reference's peeks were counted");
      assert.ok(hits >= 200, `${hits} refusals answered from memory`);
      // Once the oldest hit has left the window, Redis is asked again and admits.
      let admitted = false;
      while (!admitted && performance.now() - refusedAt < 5000) {
        admitted = (await store.hit(key, Date.now())).allowed;
        if (!admitted) await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.ok(admitted, "admitted again after the reset");
    } finally {
      await reference.close();
      await store.close();
      await redis.stop();
    }
  },
});

Deno.test("Deno KV, exact: a refused caller is answered from memory without a KV call", async () => {
  const dir = await Deno.makeTempDir({ prefix: "refusal-memo-kv-" });
  let calls = 0;
  const config = configOf({
    RATE_LIMIT_STORE: "kv",
    KV_PATH: `${dir}/kv.sqlite`,
    RATE_LIMIT: "3",
  });
  const store = await openRateLimitStore(config, {
    wrapStore: (inner) => ({
      hit: (key, now) => (calls++, inner.hit(key, now)),
      peek: (key, now) => inner.peek(key, now),
      close: () => inner.close(),
    }),
  });
  try {
    for (let i = 0; i < 3; i++) {
      assert.equal((await store.hit("192.0.2.11", Date.now())).allowed, true);
    }
    const refused = await store.hit("192.0.2.11", Date.now());
    assert.deepEqual(fields(refused), { allowed: false, remaining: 0, resetSeconds: 60 });
    assert.ok(refused.resetMs! > 59_000 && refused.resetMs! <= 60_000, `${refused.resetMs} ms`);
    for (let i = 0; i < 100; i++) {
      assert.deepEqual(fields(await store.hit("192.0.2.11", Date.now())), fields(refused));
    }
    assert.equal(calls, 4);
    // Another caller is decided by the store as ever.
    assert.equal((await store.hit("192.0.2.12", Date.now())).allowed, true);
    assert.equal(calls, 5);
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a store whose clock may run faster than the steady one (Deno KV slewing by up to 2%) is held that much shorter, its fields still counted down as the store's", () => {
  const memo = new RefusalMemo({ clockRate: 0.02 });
  const refusal = Object.defineProperty(
    { allowed: false, remaining: 0, resetSeconds: 51 },
    "resetMs",
    { value: 51_000 },
  ) as Decision;
  memo.remember("192.0.2.20", 0, refusal);
  assert.deepEqual(fields(memo.recall("192.0.2.20", 49_999)!), {
    allowed: false,
    remaining: 0,
    resetSeconds: 2,
  });
  // 51,000 ms of a clock 2% fast are 50,000 ms of the steady clock: the memo ends there.
  assert.equal(memo.recall("192.0.2.20", 50_000), undefined);
  assert.throws(() => new RefusalMemo({ clockRate: 1 }), RangeError);
});
