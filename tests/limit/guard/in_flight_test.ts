/**
 * Requests in flight for one caller share one store call while the caller is likely refused
 * (`lib/limit/guard/in_flight.ts`, in `GuardedStore`): what is shared (a refusal, through the memo)
 * and what never is (an admission), what a failed call does to those waiting, and, over random
 * interleavings of requests, answers and time, that nothing is admitted without the store and
 * every refusal is one the store gives at that instant. With an exact sliding log whose answers the
 * test delivers, and a real Redis (hit scripts counted by `INFO commandstats`).
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
import {
  GuardedStore,
  MOST_TIMEOUTS_PER_DECISION,
} from "../../../lib/limit/guard/guarded_store.ts";
import {
  MEMO_HOLD_MS,
  MEMO_SPREAD_MS,
  RefusalMemo,
} from "../../../lib/limit/guard/refusal_memo.ts";
import { CallsInFlight } from "../../../lib/limit/guard/in_flight.ts";
import { openRateLimitStore } from "../../../lib/limit/open_store.ts";
import { loadConfig } from "../../../lib/config/config.ts";
import { recordEnv } from "../../../lib/config/env.ts";
import { redisCli, redisUnavailableReason, startRedis } from "../../_redis.ts";

const POLICY: RateLimitPolicy = { limit: 60, windowMs: 60_000 };
const T0 = 1_800_000_000_000;

/** A call the store has received and not answered yet. */
interface Pending {
  key: string;
  resolve: (decision: Decision) => void;
  reject: (error: Error) => void;
}

/**
 * An exact store whose answers the test delivers: each is decided when it is delivered, by the
 * store's clock then (`storeNow`), as a store decides some time after the call was sent.
 */
class DeferredStore implements RateLimitStore {
  logs = new CallerLogs();
  storeNow = T0;
  calls = 0;
  admitted = 0;
  pending: Pending[] = [];
  constructor(readonly policy: RateLimitPolicy = POLICY) {}
  hit(key: string): Promise<Decision> {
    this.calls++;
    return new Promise((resolve, reject) => this.pending.push({ key, resolve, reject }));
  }
  peek(key: string): Decision {
    return this.logs.peek(key, this.storeNow, this.policy);
  }
  /** Answers the call in flight at `index` (the oldest by default); resolves once it settled. */
  async deliver(index = 0): Promise<void> {
    const [call] = this.pending.splice(index, 1);
    const decision = this.logs.hit(call!.key, this.storeNow, this.policy).decision;
    if (decision.allowed) this.admitted++;
    call!.resolve(decision);
    await settled();
  }
  /** Answers every call in flight, oldest first, those sent meanwhile included. */
  async deliverAll(): Promise<void> {
    while (this.pending.length > 0) await this.deliver();
  }
  /** Fails the oldest call in flight. */
  async fail(): Promise<void> {
    this.pending.shift()!.reject(new Error("connection reset"));
    await settled();
  }
  close(): void {}
}

/**
 * Lets every promise callback run: an answer reaches a waiting request through a few chained
 * callbacks (the guard's bound, its memo, the wake-up, the request decided again), far fewer than
 * these turns; no timer, so that the property's thousands of answers take milliseconds.
 */
async function settled(): Promise<void> {
  for (let turn = 0; turn < 64; turn++) await Promise.resolve();
}

/** A guard over a {@linkcode DeferredStore} on test clocks, holds without spread. */
function deferred(policy = POLICY) {
  const store = new DeferredStore(policy);
  let steady = 0;
  const guard = new GuardedStore(store, {
    policy,
    timeoutMs: 60_000,
    onError: "open",
    steadyClock: () => steady,
    memo: { random: () => 0 },
  });
  const at = (ms: number) => {
    steady = ms;
    store.storeNow = T0 + ms;
  };
  /** One request, answered by the store as soon as it is sent. */
  const one = async (key: string) => {
    const answer = guard.hit(key, 0);
    if (store.pending.length > 0) await store.deliverAll();
    return await answer;
  };
  return { store, guard, at, one };
}

const fields = (d: Decision) => ({
  allowed: d.allowed,
  remaining: d.remaining,
  resetSeconds: d.resetSeconds,
});

Deno.test("64 requests of a refused caller whose hold has ended share one store call, and are refused with its fields", async () => {
  const { store, guard, at, one } = deferred();
  for (let i = 0; i < 60; i++) assert.equal((await one("192.0.2.1")).allowed, true);
  assert.equal((await one("192.0.2.1")).allowed, false);
  at(MEMO_HOLD_MS); // the hold is over: the memo is being refreshed
  const answers = Array.from({ length: 64 }, () => guard.hit("192.0.2.1", 0));
  assert.equal(store.pending.length, 1, "one call in flight");
  await store.deliver();
  const decided = await Promise.all(answers);
  assert.equal(store.calls, 62);
  for (const d of decided) assert.deepEqual(fields(d), fields(store.peek("192.0.2.1")));
  assert.equal(guard.waitedInFlight, 63);
  assert.equal(guard.answeredFromMemory, 63);
});

Deno.test("after an admission that left nothing, the caller's next requests wait for the one call in flight", async () => {
  const { store, guard, one } = deferred();
  for (let i = 0; i < 60; i++) await one("192.0.2.2");
  assert.equal(store.peek("192.0.2.2").remaining, 0);
  const answers = Array.from({ length: 10 }, () => guard.hit("192.0.2.2", 0));
  assert.equal(store.pending.length, 1);
  await store.deliver();
  assert.ok((await Promise.all(answers)).every((d) => !d.allowed));
  assert.equal(store.calls, 61);
  // A caller with quota left is not held back: its concurrent requests each call.
  const fresh = Array.from({ length: 10 }, () => guard.hit("192.0.2.3", 0));
  assert.equal(store.pending.length, 10);
  await store.deliverAll();
  assert.ok((await Promise.all(fresh)).every((d) => d.allowed));
});

Deno.test("an admission is never shared: when the store forgot the caller, each waiting request calls it, and exactly the limit is admitted", async () => {
  const { store, guard, at, one } = deferred();
  for (let i = 0; i < 61; i++) await one("192.0.2.4");
  at(MEMO_HOLD_MS);
  store.logs = new CallerLogs(); // the store forgot (a key deleted, a restart empty)
  const answers = Array.from({ length: 64 }, () => guard.hit("192.0.2.4", 0));
  assert.equal(store.pending.length, 1);
  await store.deliver(); // admitted with 59 left: the others were not likely refused after all
  assert.equal(store.pending.length, 63, "each waiting request asks the store");
  await store.deliverAll();
  const decided = await Promise.all(answers);
  assert.equal(decided.filter((d) => d.allowed).length, 60);
  assert.equal(store.admitted, 60 + 60);
  assert.equal(store.calls, 61 + 64);
});

Deno.test("a call that fails releases the requests waiting for it: each then asks the store itself", async () => {
  const { store, guard, at, one } = deferred();
  for (let i = 0; i < 61; i++) await one("192.0.2.5");
  at(MEMO_HOLD_MS);
  const answers = Array.from({ length: 8 }, () => guard.hit("192.0.2.5", 0));
  assert.equal(store.pending.length, 1);
  await store.fail();
  assert.equal(store.pending.length, 7, "no request waits for a second failure");
  await store.deliverAll();
  const decided = await Promise.all(answers);
  assert.ok(guard.answeredByPolicy(decided[0]!), "the failed call: the policy's answer");
  assert.ok(decided.slice(1).every((d) => !d.allowed && !guard.answeredByPolicy(d)));
});

Deno.test("over random interleavings of requests, answers and time, nothing is admitted without the store, every refusal is one the store gives at that instant, and every request is answered", async () => {
  const policy = { limit: 3, windowMs: 10_000 };
  const step = fc.oneof(
    {
      weight: 3,
      arbitrary: fc.record({
        fire: fc.integer({ min: 1, max: 8 }),
        key: fc.integer({ min: 0, max: 1 }),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        advance: fc.oneof(fc.integer({ min: 0, max: 300 }), fc.integer({ min: 2000, max: 4000 })),
      }),
    },
    { weight: 3, arbitrary: fc.record({ deliver: fc.nat() }) },
  );
  let waited = 0;
  let fromMemory = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(step, { maxLength: 80, size: "max" }), async (steps) => {
      const { store, guard, at } = deferred(policy);
      let now = 0;
      let answered = 0;
      let admitted = 0;
      let fired = 0;
      const wrong: string[] = [];
      const all: Promise<void>[] = [];
      for (const s of steps) {
        if ("fire" in s) {
          const key = `192.0.2.${s.key}`;
          fired += s.fire;
          /** Checks an answer at the instant it is given (a memo's at once, a call's on delivery). */
          const check = (d: Decision) => {
            answered++;
            if (d.allowed) return void admitted++;
            // The store refuses too at that instant, for no less long.
            const truth = store.peek(key);
            if (truth.allowed || d.resetSeconds > truth.resetSeconds) {
              wrong.push(`at ${now} ms: ${JSON.stringify(d)}, the store ${JSON.stringify(truth)}`);
            }
          };
          for (let i = 0; i < s.fire; i++) {
            const answer = guard.hit(key, 0);
            if (answer instanceof Promise) all.push(answer.then(check));
            else check(answer);
          }
        } else if ("advance" in s) {
          at(now += s.advance);
        } else if (store.pending.length > 0) {
          await store.deliver(s.deliver % store.pending.length);
        }
      }
      while (store.pending.length > 0) await store.deliverAll();
      await Promise.all(all);
      assert.deepEqual(wrong, [], "every refusal is one the store gives, for no longer");
      assert.equal(answered, fired, "every request answered");
      assert.equal(admitted, store.admitted, "every admission is the store's");
      waited += guard.waitedInFlight;
      fromMemory += guard.answeredFromMemory;
    }),
    { numRuns: 300 },
  );
  // The runs reached what is under test: requests that waited, refusals from memory.
  assert.ok(waited > 100 && fromMemory > 100, `${waited} waits, ${fromMemory} from memory`);
});

Deno.test("CallsInFlight: a request waits only while a call of its caller is in flight, sent within waitMs, and the caller is likely refused", () => {
  const memo = new RefusalMemo({ random: () => 0 });
  let now = 0;
  const flights = new CallsInFlight(memo, { waitMs: 100, clock: () => now });
  const refused = { allowed: false, remaining: 0, resetSeconds: 60, resetMs: 60_000 };
  memo.remember("a", 0, refused);
  now = MEMO_HOLD_MS;
  assert.equal(flights.mustWait("a", now), false, "nothing in flight");
  flights.sent("a");
  assert.equal(flights.mustWait("a", now), true);
  assert.equal(flights.mustWait("a", now + 99), true);
  assert.equal(flights.mustWait("a", now + 100), false, "sent 100 ms ago: no longer waited for");
  assert.equal(flights.mustWait("b", now), false, "another caller");
  flights.answered("a");
  assert.equal(flights.mustWait("a", now), false);
  // Likely refused until a hold after the refusal's own end; then no longer.
  now = 60_000 + MEMO_HOLD_MS - 1;
  flights.sent("a");
  assert.equal(flights.mustWait("a", now), true);
  assert.equal(flights.mustWait("a", 60_000 + MEMO_HOLD_MS), false);
  assert.ok(MEMO_SPREAD_MS < MEMO_HOLD_MS);
});

Deno.test("CallsInFlight: a call that never answers (its request cancelled) holds a waiter waitMs at most, and is forgotten", async () => {
  const memo = new RefusalMemo();
  const flights = new CallsInFlight(memo, { waitMs: 50, clock: () => performance.now() });
  memo.remember("a", performance.now(), { allowed: true, remaining: 0, resetSeconds: 60 });
  flights.sent("a"); // never answered
  assert.equal(flights.mustWait("a", performance.now()), true);
  const started = performance.now();
  await flights.next("a");
  const waited = performance.now() - started;
  assert.ok(waited >= 40 && waited < 1000, `woken by its own timer after ${waited} ms`);
  assert.equal(flights.mustWait("a", performance.now()), false, "the lost call is not waited for");
  // The next call is waited for as any; the lost one is pruned as calls are sent.
  flights.sent("a");
  assert.equal(flights.mustWait("a", performance.now()), true);
  const woken = flights.next("a");
  flights.answered("a");
  await woken;
  assert.equal(flights.mustWait("a", performance.now()), false);
});

Deno.test("a request waits for other requests' calls the store timeout at most in all, however often it is woken: a slow store answering 'admitted, nothing left' answers 16 requests within MOST_TIMEOUTS_PER_DECISION timeouts, each call passed the time waited", async () => {
  const TIMEOUT_MS = 50;
  const ROUND_TRIP_MS = 40;
  const nows: number[] = [];
  // Each call answers after 40 ms that the caller was admitted with nothing left: still likely
  // refused, so the woken waiters wait again for the next of them to call.
  const slow: RateLimitStore = {
    hit(_key, now) {
      nows.push(now);
      return new Promise((resolve) =>
        setTimeout(() => resolve({ allowed: true, remaining: 0, resetSeconds: 60 }), ROUND_TRIP_MS)
      );
    },
    peek: () => assert.fail("not asked"),
    close() {},
  };
  const guard = new GuardedStore(slow, { policy: POLICY, timeoutMs: TIMEOUT_MS, onError: "open" });
  const key = "192.0.2.41";
  await guard.hit(key, 0); // admitted with nothing left: the next requests are likely refused
  nows.length = 0;
  const NOW = 1_000_000;
  const started = performance.now();
  const took = await Promise.all(
    Array.from(
      { length: 16 },
      async () => (await guard.hit(key, NOW), performance.now() - started),
    ),
  );
  const longest = Math.max(...took);
  // Before the shared deadline the last of them waited for 15 calls in turn (about 640 ms).
  assert.ok(
    longest < MOST_TIMEOUTS_PER_DECISION * TIMEOUT_MS,
    `the slowest answer took ${longest.toFixed(0)} ms: ${took.map((t) => t.toFixed(0))}`,
  );
  assert.ok(guard.waitedInFlight > 0, "requests waited for the call in flight");
  // One request called at once; every other called after waiting, with the time moved on.
  assert.equal(nows.filter((now) => now === NOW).length, 1, JSON.stringify(nows));
  assert.ok(
    nows.filter((now) => now !== NOW).every((now) => now >= NOW + ROUND_TRIP_MS / 2),
    JSON.stringify(nows),
  );
});

const skip = redisUnavailableReason();

/** Hit scripts Redis ran so far (`EVALSHA`, or `EVAL` the first time), from `INFO commandstats`. */
async function hitScripts(port: number): Promise<number> {
  const info = await redisCli(["-p", String(port), "INFO", "commandstats"]);
  const calls = (name: string) =>
    Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
  return calls("evalsha") + calls("eval");
}

Deno.test({
  name: `Redis, exact: one refused caller on 64 concurrent requests costs one hit script per hold${
    skip ? ` (skipped: ${skip})` : ""
  }`,
  ignore: skip !== undefined,
  // Slow (about 7 s): it hammers across two holds of the shipped MEMO_HOLD_MS.
  async fn() {
    const redis = await startRedis();
    const config = loadConfig(recordEnv({
      RATE_LIMIT_STORE: "redis",
      REDIS_URL: redis.url,
      RATE_LIMIT: "3",
    }));
    if (!config.ok) throw new Error(config.errors.join("; "));
    const store = await openRateLimitStore(config.config);
    assert.ok(store instanceof GuardedStore);
    try {
      const key = "192.0.2.40";
      for (let i = 0; i < 3; i++) assert.equal((await store.hit(key, Date.now())).allowed, true);
      assert.equal((await store.hit(key, Date.now())).allowed, false);
      const before = await hitScripts(redis.port);
      const started = performance.now();
      let admitted = 0;
      let requests = 0;
      // 64 connections' worth: each asks again as soon as it is answered (a timer's turn between).
      const connection = async () => {
        while (performance.now() - started < 2 * MEMO_HOLD_MS + 500) {
          if ((await store.hit(key, Date.now())).allowed) admitted++;
          requests++;
          await new Promise((resolve) => setTimeout(resolve, 0));
        }
      };
      await Promise.all(Array.from({ length: 64 }, connection));
      const elapsed = performance.now() - started;
      const scripts = await hitScripts(redis.port) - before;
      assert.equal(admitted, 0);
      // A hold is 2 to 3 s: one script per hold, so at most one per 2 s (and one more begun).
      const most = Math.ceil(elapsed / (MEMO_HOLD_MS - MEMO_SPREAD_MS)) + 1;
      assert.ok(scripts >= 1 && scripts <= most, `${scripts} hit scripts for ${requests} requests`);
      assert.ok(store.waitedInFlight > 0, "requests waited for the refresh in flight");
    } finally {
      await store.close();
      await redis.stop();
    }
  },
});
