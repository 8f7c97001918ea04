/**
 * Refusals answered from memory (`lib/limit/guard/refusal_memo.ts`, in `GuardedStore`): a caller an
 * `exact` store refused is refused again with the store's own fields and no store call for a hold
 * of a few seconds at most (`MEMO_HOLD_MS`, spread down by up to `MEMO_SPREAD_MS`), never past its
 * refusal's end; a store that forgets is believed within that hold; bounded; a copied decision
 * still feeds it. Against an exact sliding log with test clocks (the fields compared with the
 * store's own peek at several instants, the edge at the exact reset instant), against a real Redis
 * (no command until the reset: `INFO commandstats`; a key deleted, `FLUSHALL`, a restart empty)
 * and a Deno KV file.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import type {
  Decision,
  RateLimitPolicy,
  RateLimitStore,
} from "../../../lib/limit/core/decision.ts";
import { CallerLogs } from "../../../lib/limit/durable_object/object_logs.ts";
import { GuardedStore } from "../../../lib/limit/guard/guarded_store.ts";
import {
  MAX_REFUSALS,
  MEMO_HOLD_MS,
  MEMO_SPREAD_MS,
  RefusalMemo,
} from "../../../lib/limit/guard/refusal_memo.ts";
import { openRateLimitStore } from "../../../lib/limit/open_store.ts";
import { loadConfig } from "../../../lib/config/config.ts";
import { recordEnv } from "../../../lib/config/env.ts";
import { redisCli, redisUnavailableReason, startRedis } from "../../_redis.ts";
import { openRedisStore } from "../../../lib/limit/redis/redis_store.ts";
import { logKey } from "../../../lib/limit/redis/redis_client.ts";

const POLICY: RateLimitPolicy = { limit: 60, windowMs: 60_000 };
const T0 = 1_800_000_000_000;

/**
 * An exact store deciding by its own clock (`storeNow`, as Redis and a Durable Object do), its
 * answers arriving `rttMs` after the call (the steady clock moved on meanwhile); counts its calls.
 * `forget()` loses every log, as a store restarted empty does.
 */
class ClockedStore implements RateLimitStore {
  logs = new CallerLogs();
  calls = 0;
  storeNow = T0;
  hit(key: string): Decision {
    this.calls++;
    return this.logs.hit(key, this.storeNow, POLICY).decision;
  }
  peek(key: string): Decision {
    return this.logs.peek(key, this.storeNow, POLICY);
  }
  forget(): void {
    this.logs = new CallerLogs();
  }
  close(): void {}
}

/** A guard over a {@linkcode ClockedStore} on test clocks; `random` draws the memo's spread. */
function memoized(random?: () => number) {
  const store = new ClockedStore();
  let steady = 0;
  const guard = new GuardedStore(store, {
    policy: POLICY,
    timeoutMs: 100,
    onError: "open",
    steadyClock: () => steady,
    ...(random ? { memo: { random } } : {}),
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

/** A refusal of `resetMs`, as a store sends it. */
const refusal = (resetMs: number): Decision => ({
  allowed: false,
  remaining: 0,
  resetSeconds: Math.ceil(resetMs / 1000),
  resetMs,
});

Deno.test("a refused caller is answered from memory with the store's own fields, no store call, for one hold at most; then the store is asked again, and at the exact instant its oldest hit leaves the window it is admitted", async () => {
  const { store, guard, at } = memoized(() => 0); // no spread: each hold is MEMO_HOLD_MS
  for (let i = 0; i < 60; i++) assert.equal((await guard.hit("192.0.2.1", 0)).allowed, true);
  at(250); // the refusal comes 250 ms after the first hit
  const refused = await guard.hit("192.0.2.1", 0);
  assert.deepEqual(refused, { allowed: false, remaining: 0, resetSeconds: 60, resetMs: 59_750 });
  assert.equal(store.calls, 61);
  const probes: Array<[ms: number, asked: number]> = [
    [251, 0],
    [999, 0],
    [1000, 0],
    [1001, 0],
    [3249, 0], // the last instant of the hold
    [3250, 1], // the hold is over: the store is asked, and refuses again
    [6249, 0],
    [30_250, 1],
    [58_999, 1], // held from here until the refusal's own end, 1,001 ms on: not a full hold
    [59_000, 0],
    [59_999, 0],
  ];
  for (const [ms, asked] of probes) {
    at(ms);
    const calls: number = store.calls;
    const memo = await guard.hit("192.0.2.1", 0);
    assert.deepEqual(fields(memo), fields(store.peek("192.0.2.1")), `at ${ms} ms`);
    assert.equal(memo.allowed, false);
    assert.equal(store.calls, calls + asked, `at ${ms} ms`);
  }
  assert.equal(guard.answeredFromMemory, 8);
  // The exact instant the oldest hit leaves the window: the store is asked, and admits.
  at(60_000);
  const again = await guard.hit("192.0.2.1", 0);
  assert.equal(store.calls, 65);
  assert.equal(again.allowed, true);
});

Deno.test("the memo never refuses longer than the store: it counts from when the call was sent, not from when the store decided", async () => {
  const { store, guard, at } = memoized();
  for (let i = 0; i < 60; i++) await guard.hit("192.0.2.2", 0);
  // Sent at steady 58,000; the store decided 400 ms later by its clock (a slow round trip).
  at(58_000, 400);
  assert.equal((await guard.hit("192.0.2.2", 0)).allowed, false);
  at(59_599, 0);
  assert.equal((await guard.hit("192.0.2.2", 0)).allowed, false);
  assert.equal(store.calls, 61);
  // 1,600 ms after it was sent: the memo is over, 400 ms before the store's refusal is.
  at(59_600, 0);
  assert.equal((await guard.hit("192.0.2.2", 0)).allowed, false);
  assert.equal(store.calls, 62, "asked again: the store still refuses, and says for how long");
  at(60_000, 0);
  assert.equal((await guard.hit("192.0.2.2", 0)).allowed, true);
});

Deno.test("a hold lasts MEMO_HOLD_MS less a random part of MEMO_SPREAD_MS, never past the refusal's end nor a fast store clock's, and counts the store's reset down", () => {
  fc.assert(
    fc.property(
      fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
      fc.oneof(fc.integer({ min: 1, max: 4000 }), fc.integer({ min: 1, max: 86_400_000 })),
      fc.constantFrom(0, 0.02),
      fc.integer({ min: 0, max: 1e9 }),
      (draw, resetMs, clockRate, sent) => {
        const memo = new RefusalMemo({ clockRate, random: () => draw });
        memo.remember("192.0.2.1", sent, refusal(resetMs));
        const hold = Math.min(resetMs / (1 + clockRate), MEMO_HOLD_MS - draw * MEMO_SPREAD_MS);
        assert.ok(hold <= resetMs && hold <= MEMO_HOLD_MS);
        assert.ok(hold >= Math.min(resetMs / (1 + clockRate), MEMO_HOLD_MS - MEMO_SPREAD_MS));
        const before = memo.recall("192.0.2.1", sent + hold - 0.01);
        assert.ok(before !== undefined, `held until ${hold} ms`);
        assert.ok(Math.abs(before.resetMs! - (resetMs - hold + 0.01)) < 1e-6);
        assert.equal(before.resetSeconds, Math.ceil(before.resetMs! / 1000));
        assert.equal(memo.recall("192.0.2.1", sent + hold), undefined, `over at ${hold} ms`);
      },
    ),
    { numRuns: 500 },
  );
});

Deno.test("the holds of instances that learned one refusal at one instant end spread over the spread, each within it", () => {
  const ends: number[] = [];
  for (let i = 0; i < 100; i++) {
    const memo = new RefusalMemo(); // the shipped random draw
    memo.remember("192.0.2.1", 0, refusal(60_000));
    let end = MEMO_HOLD_MS - MEMO_SPREAD_MS;
    while (memo.recall("192.0.2.1", end) !== undefined) end++;
    ends.push(end);
  }
  assert.ok(ends.every((end) => end >= MEMO_HOLD_MS - MEMO_SPREAD_MS && end <= MEMO_HOLD_MS));
  // 100 uniform draws over 1,000 ms: a span under half of it has odds of about 1 in 10^28.
  const span = Math.max(...ends) - Math.min(...ends);
  assert.ok(span >= MEMO_SPREAD_MS / 2, `the ends span ${span} ms`);
  assert.ok(new Set(ends).size >= 50, `${new Set(ends).size} distinct instants`);
});

Deno.test("a refused caller hammering for a whole window costs its instance one store call per hold at most, and at least one per MEMO_HOLD_MS", async () => {
  const { store, guard, at } = memoized();
  for (let i = 0; i < 60; i++) await guard.hit("192.0.2.5", 0);
  let admitted = 0;
  for (let ms = 1; ms < 60_000; ms += 10) {
    at(ms);
    if ((await guard.hit("192.0.2.5", 0)).allowed) admitted++;
  }
  assert.equal(admitted, 0);
  const calls = store.calls - 60;
  const most = Math.ceil(60_000 / (MEMO_HOLD_MS - MEMO_SPREAD_MS));
  const least = Math.floor(60_000 / MEMO_HOLD_MS);
  assert.ok(calls <= most && calls >= least, `${calls} calls in 6,000 requests`);
});

Deno.test("a store that forgets the caller is believed within MEMO_HOLD_MS: the instance that refused it admits it", async () => {
  for (const draw of [0, 0.5, 0.999]) {
    const { store, guard, at } = memoized(() => draw);
    for (let i = 0; i < 60; i++) await guard.hit("192.0.2.6", 0);
    at(100);
    assert.equal((await guard.hit("192.0.2.6", 0)).allowed, false);
    at(110);
    store.forget(); // its key deleted, the store flushed or restarted empty
    let admittedAt: number | undefined;
    for (let ms = 120; admittedAt === undefined && ms < 60_000; ms += 10) {
      at(ms);
      const decision = await guard.hit("192.0.2.6", 0);
      if (decision.allowed) {
        admittedAt = ms;
        assert.equal(decision.remaining, 59, "decided by the store that forgot");
      }
    }
    assert.ok(admittedAt !== undefined && admittedAt <= 100 + MEMO_HOLD_MS, `at ${admittedAt} ms`);
  }
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

Deno.test("an admission with quota left keeps its call's instant for a hold: an older call's refusal answering after it changes nothing, a newer one is held", () => {
  const key = "192.0.2.8";
  const admitted: Decision = { allowed: true, remaining: 59, resetSeconds: 60 };
  const memo = new RefusalMemo({ random: () => 0 });
  memo.remember(key, 0, refusal(60_000));
  // The hold is over; two calls go out: A at 3,100 (slow), B at 3,200, and the store forgot the
  // caller (its key deleted), so B is admitted and answers first; A's refusal, decided before the
  // key went, answers after it.
  memo.remember(key, 3200, admitted);
  memo.remember(key, 3100, refusal(56_900));
  assert.equal(memo.recall(key, 3300), undefined, "the older call's refusal is not held");
  assert.equal(memo.likelyRefused(key, 3300), false);
  assert.equal(memo.size, 1, "the tombstone: one entry, bounded like the refusals");
  // A newer refusal is held as ever.
  memo.remember(key, 3400, refusal(50_000));
  assert.equal(memo.recall(key, 3500)?.allowed, false);
  // The tombstone lasts a hold: after it, nothing is left of the caller.
  memo.remember(key, 10_000, admitted);
  assert.equal(memo.likelyRefused(key, 10_000 + MEMO_HOLD_MS - 1), false);
  assert.equal(memo.size, 1);
  assert.equal(memo.likelyRefused(key, 10_000 + MEMO_HOLD_MS), false);
  assert.equal(memo.size, 0);
  // An admission of a caller the memo does not know adds nothing: admitted callers never push
  // refused ones out.
  for (let i = 0; i < 100; i++) memo.remember(`10.1.${i}`, 20_000, admitted);
  assert.equal(memo.size, 0);
});

Deno.test(`the memo holds at most ${MAX_REFUSALS} callers: a spray of refused callers evicts the oldest`, () => {
  const memo = new RefusalMemo();
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

/** How a store forgets a caller, and how the test makes the real Redis do it. */
const FORGETTING: Array<
  [string, (redis: Awaited<ReturnType<typeof startRedis>>, key: string) => Promise<void>]
> = [
  ["its key deleted", async (redis, key) => {
    const deleted = await redisCli([
      "-p",
      String(redis.port),
      "DEL",
      logKey("single", "rate_limit:", key),
    ]);
    assert.equal(deleted.trim(), "1", "the caller's log was its key");
  }],
  ["FLUSHALL", async (redis) => void await redisCli(["-p", String(redis.port), "FLUSHALL"])],
  ["Redis restarted empty", async (redis) => {
    await redis.stop();
    await redis.start();
  }],
];

/**
 * How long after the store forgot the instance may still refuse, beyond the hold: the next call's
 * round trip, the poll's 20 ms, the client's reconnection after a restart, a loaded machine.
 */
const FORGET_SLACK_MS = 1500;

Deno.test({
  name:
    `Redis, exact, limit 3: a caller whose key is deleted, after FLUSHALL, and after Redis restarted empty, is admitted by the instance that refused it within MEMO_HOLD_MS${
      skip ? ` (skipped: ${skip})` : ""
    }`,
  ignore: skip !== undefined,
  // Slow (about 3 s a case): the bound under test is the shipped hold, seconds of the steady clock.
  async fn() {
    const redis = await startRedis();
    const config = configOf({
      RATE_LIMIT_STORE: "redis",
      REDIS_URL: redis.url,
      RATE_LIMIT: "3",
      RATE_LIMIT_ON_STORE_ERROR: "closed",
    });
    const store = await openRateLimitStore(config);
    assert.ok(store instanceof GuardedStore);
    try {
      for (const [index, [how, forget]] of FORGETTING.entries()) {
        const key = `192.0.2.${30 + index}`;
        for (let i = 0; i < 3; i++) assert.equal((await store.hit(key, Date.now())).allowed, true);
        const refused = await store.hit(key, Date.now());
        assert.equal(refused.allowed, false, how);
        assert.ok(refused.resetMs! > 55_000, `${how}: refused for the window`);
        const fromMemory: number = store.answeredFromMemory;
        assert.equal((await store.hit(key, Date.now())).allowed, false, how);
        assert.equal(store.answeredFromMemory, fromMemory + 1, `${how}: refused from memory`);
        await forget(redis, key);
        const forgotAt = performance.now();
        let admitted: Decision | undefined;
        while (admitted === undefined && performance.now() - forgotAt < 10_000) {
          const decision = await store.hit(key, Date.now());
          if (decision.allowed && !store.answeredByPolicy(decision)) admitted = decision;
          else await new Promise((resolve) => setTimeout(resolve, 20));
        }
        const after = performance.now() - forgotAt;
        assert.equal(
          admitted?.remaining,
          2,
          `${how}: admitted by Redis, which forgot (${after} ms)`,
        );
        assert.ok(after <= MEMO_HOLD_MS + FORGET_SLACK_MS, `${how}: admitted ${after} ms after`);
      }
    } finally {
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
  const memo = new RefusalMemo({ clockRate: 0.02, random: () => 0 });
  memo.remember("192.0.2.20", 0, refusal(2550));
  assert.deepEqual(memo.recall("192.0.2.20", 2499), {
    allowed: false,
    remaining: 0,
    resetSeconds: 1,
    resetMs: 51,
  });
  // 2,550 ms of a clock 2% fast are 2,500 ms of the steady clock: the memo ends there.
  assert.equal(memo.recall("192.0.2.20", 2500), undefined);
  assert.throws(() => new RefusalMemo({ clockRate: 1 }), RangeError);
  assert.throws(() => new RefusalMemo({ holdMs: 0 }), RangeError);
  assert.throws(() => new RefusalMemo({ holdMs: 1000, spreadMs: 1000 }), RangeError);
});
