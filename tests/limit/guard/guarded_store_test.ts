/**
 * The failure policy: every call bounded, `open` admits and `closed` refuses with
 * `rate_limit_unavailable` while the store fails, one report per incident, a probe after the interval,
 * recovery without a restart, and never a 5xx from the handler.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createHandler } from "../../../lib/handler.ts";
import { loadConfig } from "../../../lib/config/config.ts";
import { recordEnv } from "../../../lib/config/env.ts";
import { loadContent } from "../../../lib/pages/content.ts";
import type {
  Decision,
  RateLimitPolicy,
  RateLimitStore,
} from "../../../lib/limit/core/decision.ts";
import { BREAKER_DEFAULTS } from "../../../lib/limit/guard/circuit_breaker.ts";
import { openRedisStore } from "../../../lib/limit/redis/redis_store.ts";
import { redisUnavailableReason, startRedis } from "../../_redis.ts";
import {
  GuardedStore,
  LAST_DECISIONS_LIMIT,
  type StoreFailurePolicy,
  type StoreIncident,
  StoreTimeoutError,
} from "../../../lib/limit/guard/guarded_store.ts";
import { DISK_STATIC_FILES } from "../../../lib/server/static_files.ts";

const POLICY: RateLimitPolicy = { limit: 60, windowMs: 60_000 };
const ANSWER: Decision = { allowed: true, remaining: 41, resetSeconds: 17 };

/** A store whose behaviour the test switches: answer, fail, or hang; it counts its calls. */
class SwitchableStore implements RateLimitStore {
  mode: "answer" | "fail" | "throw" | "hang" = "answer";
  calls = 0;
  hit(): Promise<Decision> {
    return this.#call();
  }
  peek(): Promise<Decision> {
    return this.#call();
  }
  close(): void {}
  #call(): Promise<Decision> {
    this.calls++;
    switch (this.mode) {
      case "answer":
        return Promise.resolve(ANSWER);
      case "fail":
        return Promise.reject(new Error("connection refused"));
      case "throw":
        throw new TypeError("not connected");
      case "hang":
        return new Promise(() => {});
    }
  }
}

function guarded(
  onError: StoreFailurePolicy,
  timeoutMs = 1000,
  breaker: { minFailures?: number } = { minFailures: 1 },
) {
  const store = new SwitchableStore();
  const incidents: StoreIncident[] = [];
  let clock = 1_000_000;
  const guard = new GuardedStore(store, {
    policy: POLICY,
    timeoutMs,
    onError,
    onIncident: (incident) => incidents.push(incident),
    probeIntervalMs: 1000,
    clock: () => clock,
    // Most tests follow one incident from its first failure; the default window is tested below.
    breaker,
  });
  return { store, guard, incidents, advance: (ms: number) => (clock += ms) };
}

Deno.test("guard passes the store's decisions through while it answers", async () => {
  const { guard, incidents } = guarded("closed");
  assert.deepEqual(await guard.hit("a", 0), ANSWER);
  assert.deepEqual(await guard.peek("a", 0), ANSWER);
  assert.deepEqual(incidents, []);
  assert.equal(guard.healthy, true);
});

Deno.test("fail open admits uncounted with a fresh window's headers when the store fails", async () => {
  const { store, guard } = guarded("open");
  store.mode = "fail";
  assert.deepEqual(await guard.hit("a", 0), { allowed: true, remaining: 59, resetSeconds: 60 });
  assert.deepEqual(await guard.peek("a", 0), { allowed: true, remaining: 60, resetSeconds: 60 });
});

Deno.test("fail closed refuses as unavailable with a retry at the next probe", async () => {
  const { store, guard } = guarded("closed");
  store.mode = "fail";
  assert.deepEqual(await guard.hit("a", 0), {
    allowed: false,
    remaining: 0,
    resetSeconds: 1,
    unavailable: true,
  });
});

Deno.test("guard treats a synchronous throw like a failed call", async () => {
  const { store, guard, incidents } = guarded("closed");
  store.mode = "throw";
  assert.equal((await guard.hit("a", 0)).unavailable, true);
  assert.deepEqual(incidents, [{
    kind: "unavailable",
    policy: "closed",
    error: "TypeError: not connected",
  }]);
});

Deno.test("guard answers by policy when the store outlives the timeout", async () => {
  const { store, guard, incidents } = guarded("closed", 5);
  store.mode = "hang";
  assert.equal((await guard.hit("a", 0)).unavailable, true);
  assert.equal(incidents.length, 1);
  const first = incidents[0]!;
  assert.equal(first.kind === "unavailable" && first.error, `${new StoreTimeoutError(5)}`);
});

Deno.test("guard reports an incident once and leaves the store alone until the probe", async () => {
  const { store, guard, incidents, advance } = guarded("open");
  store.mode = "fail";
  await guard.hit("a", 0);
  for (let i = 0; i < 50; i++) await guard.hit("a", 0);
  assert.equal(store.calls, 1, "no call reaches a failed store before the probe interval");
  assert.equal(incidents.length, 1);
  advance(1000);
  await guard.hit("a", 0);
  assert.equal(store.calls, 2, "one probe after the interval");
  assert.equal(incidents.length, 1, "a failed probe is the same incident");
  assert.equal(guard.healthy, false);
});

Deno.test("guard sends one probe at a time while the others are answered by policy", async () => {
  const { store, guard, advance } = guarded("closed", 50);
  store.mode = "fail";
  await guard.hit("a", 0);
  advance(1000);
  store.mode = "hang";
  const probe = guard.hit("a", 0);
  const others = await Promise.all([guard.hit("b", 0), guard.hit("c", 0)]);
  assert.equal(store.calls, 2);
  assert.ok(others.every((d) => d.unavailable));
  await probe;
});

Deno.test("guard recovers by itself when the store answers again", async () => {
  const { store, guard, incidents, advance } = guarded("closed");
  store.mode = "fail";
  for (let i = 0; i < 5; i++) await guard.hit("a", 0);
  store.mode = "answer";
  assert.equal((await guard.hit("a", 0)).unavailable, true, "still within the probe interval");
  advance(1500);
  assert.deepEqual(await guard.hit("a", 0), ANSWER);
  assert.equal(guard.healthy, true);
  assert.deepEqual(incidents.at(-1), { kind: "recovered", downMs: 1500, answeredByPolicy: 6 });
  assert.deepEqual(await guard.hit("a", 0), ANSWER);
  assert.equal(incidents.length, 2);
});

Deno.test("guard answers one slow call by the policy without switching the instance to it", async () => {
  const { store, guard, incidents } = guarded("closed", 5, {});
  store.mode = "hang";
  assert.equal((await guard.hit("a", 0)).unavailable, true, "the slow call's own request");
  store.mode = "answer";
  assert.deepEqual(await guard.hit("b", 0), ANSWER, "the next request reaches the store");
  assert.equal(store.calls, 2);
  assert.deepEqual(incidents, []);
  assert.equal(guard.healthy, true);
  assert.equal(guard.answeredAlone, 1);
});

Deno.test("guard trips after sustained failures over its window of calls, not before", async () => {
  const { store, guard, incidents } = guarded("open", 1000, {});
  store.mode = "fail";
  for (let i = 1; i < BREAKER_DEFAULTS.minFailures; i++) await guard.hit("a", 0);
  assert.equal(store.calls, BREAKER_DEFAULTS.minFailures - 1, "every call still reaches the store");
  assert.deepEqual(incidents, []);
  await guard.hit("a", 0);
  assert.equal(incidents.length, 1, "the failure that makes the rate sustained trips it");
  await guard.hit("a", 0);
  assert.equal(store.calls, BREAKER_DEFAULTS.minFailures, "tripped: the store is left alone");
});

Deno.test("guard does not trip on sporadic failures among successes", async () => {
  const { store, guard, incidents } = guarded("open", 1000, {});
  for (let i = 0; i < 100; i++) {
    // One call in three fails: a third of the window, under the failure ratio.
    store.mode = i % 3 === 0 ? "fail" : "answer";
    await guard.hit("a", 0);
  }
  assert.equal(store.calls, 100);
  assert.deepEqual(incidents, []);
  assert.equal(guard.answeredAlone, 34);
});

const redisSkip = redisUnavailableReason();

/** The store's timeout in the busy-loop test: far above Redis's round trip even on a loaded machine. */
const BUSY_TIMEOUT_MS = 200;

/** Busy-loop rounds: each times out for certain (four timeouts late) unless the guard extends it. */
const BUSY_ROUNDS = 3;

/** Keeps the event loop busy for `ms`: a saturated CPU, not an outage. */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // Spin.
  }
}

Deno.test({
  name: `guard does not time out a store that answered while the event loop was busy${
    redisSkip ? ` (skipped: ${redisSkip})` : ""
  }`,
  ignore: redisSkip !== undefined,
  async fn() {
    const redis = await startRedis();
    const store = await openRedisStore(redis.url, POLICY);
    const guard = new GuardedStore(store, {
      policy: POLICY,
      timeoutMs: BUSY_TIMEOUT_MS,
      onError: "closed",
    });
    try {
      await guard.hit("warm-up", Date.now());
      let byPolicy = 0;
      for (let i = 0; i < BUSY_ROUNDS; i++) {
        const decision = guard.hit(`busy-${i}`, Date.now());
        // The handler's other work holds the loop for four timeouts. The client writes the command
        // only after that (setImmediate), so Redis has one timeout from then to answer: 200 ms, not
        // 50, so that a Redis process starved by other work on a loaded machine still answers in it.
        busy(4 * BUSY_TIMEOUT_MS);
        if ((await decision).unavailable) byPolicy++;
      }
      assert.equal(
        byPolicy,
        0,
        `${byPolicy} of ${BUSY_ROUNDS} answered by the policy under a busy loop`,
      );
    } finally {
      await guard.close();
      await redis.stop();
    }
  },
});

const { config } = (() => {
  const result = loadConfig(recordEnv({ RATE_LIMIT_STORE_TIMEOUT_MS: "50" }));
  if (!result.ok) throw new Error(result.errors.join("; "));
  return result;
})();
const content = (() => {
  const result = loadContent(config, DISK_STATIC_FILES);
  if (!result.ok) throw new Error(result.errors.join("; "));
  return result.content;
})();
const INFO = { remoteAddr: { hostname: "192.0.2.1" } };

for (
  const [policy, status, code] of [
    ["closed", 429, "rate_limit_unavailable"],
    ["open", 200, undefined],
  ] as const
) {
  Deno.test(`handler answers ${status} when the store is down and the policy is ${policy}`, async () => {
    const { store, guard } = guarded(policy);
    store.mode = "fail";
    const handler = createHandler({ config, content, store: guard });
    const response = await handler(new Request("http://localhost/api/v1/platform"), INFO);
    const body = await response.json();
    assert.equal(response.status, status);
    assert.equal(body.error?.code, code);
    assert.equal(response.headers.get("ratelimit-limit"), "60");
    if (policy === "closed") {
      assert.equal(response.headers.get("retry-after"), "1");
      assert.equal(response.headers.get("ratelimit"), '"default";r=0;t=1');
    } else {
      assert.equal(response.headers.get("retry-after"), null);
      assert.equal(response.headers.get("ratelimit"), '"default";r=59;t=60');
    }
  });
}

Deno.test("a preflight's peek is answered from local state: 3,000 of them from a caller at 0 cost no store call", async () => {
  const { store, guard, advance } = guarded("closed");
  const spent: Decision = { allowed: false, remaining: 0, resetSeconds: 30 };
  store.hit = () => {
    store.calls++;
    return Promise.resolve(spent);
  };
  assert.deepEqual(await guard.hit("caller", 1_000_000), spent);
  const calls = store.calls;
  for (let i = 0; i < 3000; i++) {
    const peeked = guard.peek("caller", 1_000_000 + i);
    assert.ok(!(peeked instanceof Promise), "answered synchronously");
    assert.deepEqual(peeked, {
      allowed: true,
      remaining: 0,
      resetSeconds: 30 - Math.floor(i / 1000),
    });
  }
  assert.equal(store.calls, calls, "no store round trip");
  // A caller this instance has not seen: a fresh window, still no call; a past reset likewise.
  assert.deepEqual(guard.peek("other", 0), { allowed: true, remaining: 60, resetSeconds: 60 });
  advance(0);
  assert.deepEqual(guard.peek("caller", 1_000_000 + 30_000), {
    allowed: true,
    remaining: 60,
    resetSeconds: 60,
  });
  assert.equal(store.calls, calls);
});

Deno.test("the last decisions a guard keeps for preflights are bounded", async () => {
  const { guard } = guarded("closed");
  for (let i = 0; i <= LAST_DECISIONS_LIMIT; i++) await guard.hit(`caller ${i}`, 0);
  // The map started again at the cap: the first caller is forgotten, the last one kept.
  assert.deepEqual(guard.peek("caller 0", 0), { allowed: true, remaining: 60, resetSeconds: 60 });
  assert.deepEqual(guard.peek(`caller ${LAST_DECISIONS_LIMIT}`, 0), ANSWER);
});
