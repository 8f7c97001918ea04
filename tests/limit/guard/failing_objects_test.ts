/**
 * The failure policy over a store of many objects (`GuardedStore` with `failureScope`, as the
 * Durable Object store opens it), in process: one object per caller key deciding exactly (the
 * memory store's log of that key), any of which throws as an overloaded Durable Object does
 * ("Durable Object is overloaded") or never answers, and canaries that fail only when the whole
 * namespace does.
 *
 * - No number of failing caller keys changes an honest caller's answer: with 3, 10 and 100
 *   attacker keys whose objects throw or stall, under `open` and `closed`, the honest caller gets
 *   exactly 60 of 100 with exact fields, and the namespace is never taken for down.
 * - A failing object is no way to be unlimited: under `open` its caller gets 60 of 100 (the
 *   isolate's own count), under `closed` none; each such caller is said once per window, ten
 *   callers a window at most, never by its full address.
 * - A namespace outage is known with one caller or a thousand, within two store timeouts of the
 *   first failed call: one incident, the breaker's state `open`, no object called meanwhile but
 *   the canaries once a probe interval, and it ends when a canary answers again.
 *
 * The real store on workerd: `tests/workers/failing_objects_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { truncatedCaller } from "../../../lib/access_log.ts";
import type {
  Decision,
  RateLimitPolicy,
  RateLimitStore,
} from "../../../lib/limit/core/decision.ts";
import { type CallerNotice, MAX_CALLER_NOTICES } from "../../../lib/limit/guard/caller_notices.ts";
import {
  GuardedStore,
  MAX_EXTENSIONS,
  type StoreFailurePolicy,
  type StoreIncident,
} from "../../../lib/limit/guard/guarded_store.ts";
import { MemoryStore } from "../../../lib/limit/memory/memory_store.ts";

const POLICY: RateLimitPolicy = { limit: 60, windowMs: 60_000 };

/** The time every object decides at: one instant, so that each answer's fields are known exactly. */
const NOW = 1_800_000_000_000;

/** The store timeout of these tests, in ms. */
const TIMEOUT_MS = 40;

/** How an object fails: it throws as an overloaded Durable Object does, or never answers. */
type Fault = "overloaded" | "stall";

const OVERLOADED = "Durable Object is overloaded. Too many requests queued.";

/**
 * One object per caller key, each deciding exactly; an object named in `faults` fails, and with
 * `down` every object does, the canaries too (a namespace outage). Counts each object's calls.
 */
class Objects implements RateLimitStore {
  readonly logs = new MemoryStore(POLICY, { sweep: false });
  readonly faults = new Map<string, Fault>();
  down: Fault | undefined;
  readonly calls = new Map<string, number>();

  hit(key: string, now: number): Promise<Decision> {
    return this.#answer(key, () => this.logs.hit(key, now));
  }
  peek(key: string, now: number): Promise<Decision> {
    return this.#answer(key, () => this.logs.peek(key, now));
  }
  /** Canary `i`: an object no caller key names. */
  canary(i: number): Promise<Decision> {
    return this.#answer(`canary:${i}`, () => ({ allowed: true, remaining: 0, resetSeconds: 1 }));
  }
  close(): void {}

  /** Calls of every object whose name starts with `prefix`. */
  callsOf(prefix: string): number {
    let calls = 0;
    for (const [name, n] of this.calls) if (name.startsWith(prefix)) calls += n;
    return calls;
  }

  #answer(name: string, decide: () => Decision): Promise<Decision> {
    this.calls.set(name, (this.calls.get(name) ?? 0) + 1);
    const fault = this.down ?? this.faults.get(name);
    if (fault === "stall") return new Promise(() => {});
    if (fault === "overloaded") return Promise.reject(new Error(OVERLOADED));
    return Promise.resolve(decide());
  }
}

/** The guard as the Durable Object store opens it, over `Objects`, with a clock the test moves. */
function objectsGuard(onError: StoreFailurePolicy) {
  const objects = new Objects();
  const incidents: StoreIncident[] = [];
  /** When each incident was reported (`performance.now()`). */
  const reported: number[] = [];
  const notices: CallerNotice[] = [];
  let clock = NOW;
  const guard = new GuardedStore(objects, {
    policy: POLICY,
    timeoutMs: TIMEOUT_MS,
    onError,
    onIncident: (incident) => {
      incidents.push(incident);
      reported.push(performance.now());
    },
    clock: () => clock,
    // The refusals answered from memory keep the store's fields exactly: no time passes for them.
    steadyClock: () => 0,
    failureScope: (key) => key,
    canaries: [() => objects.canary(0), () => objects.canary(1)],
    localCount: () => new MemoryStore(POLICY, { sweep: false }),
    callerNotices: { label: truncatedCaller, write: (notice) => notices.push(notice) },
  });
  return {
    objects,
    guard,
    incidents,
    reported,
    notices,
    advance: (ms: number) => (clock += ms),
  };
}

/** A decision's four fields (a refusal's exact reset aside): what the response carries. */
function fields(decision: Decision) {
  const { allowed, remaining, resetSeconds, unavailable } = decision;
  return unavailable ? { allowed, remaining, resetSeconds, unavailable } : {
    allowed,
    remaining,
    resetSeconds,
  };
}

/** The exact answers of a 60-request limit to 100 requests at one instant: 59 down to 0, then 40 refusals. */
const SIXTY_OF_100 = Array.from(
  { length: 100 },
  (_, i) =>
    i < 60
      ? { allowed: true, remaining: 59 - i, resetSeconds: 60 }
      : { allowed: false, remaining: 0, resetSeconds: 60 },
);

/** The closed policy's answer: 429 `rate_limit_unavailable`, retry after the probe interval. */
const UNAVAILABLE = { allowed: false, remaining: 0, resetSeconds: 1, unavailable: true };

const HONEST = "192.0.2.1";

/** Attacker keys: `count` IPv4 addresses of 203.0.113.0/24 (and 198.51.100.0/24 past 256). */
function attackerKeys(count: number): string[] {
  return Array.from(
    { length: count },
    (_, i) => i < 256 ? `203.0.113.${i}` : `198.51.100.${i - 256}`,
  );
}

for (const attackers of [3, 10, 100]) {
  for (const fault of ["overloaded", "stall"] as const) {
    for (const onError of ["open", "closed"] as const) {
      Deno.test(
        `${attackers} attacker keys whose objects are ${fault}, ${onError}: the honest caller gets exactly 60 of 100 with exact fields; each attacker ${
          onError === "open" ? "60 of 100 by the isolate's count" : "none"
        }; the namespace stays up`,
        async () => {
          const { objects, guard, incidents, notices, advance } = objectsGuard(onError);
          const keys = attackerKeys(attackers);
          for (const key of keys) objects.faults.set(key, fault);
          const own: Decision[] = [];
          const theirs = keys.map((): Decision[] => []);
          // Ten seconds in 100 rounds: each attacker's object probed once a second, the canaries
          // checked once a second at most, the honest caller beside them in every round.
          for (let round = 0; round < 100; round++) {
            const [mine, ...others] = await Promise.all([
              guard.hit(HONEST, NOW),
              ...keys.map((key) => guard.hit(key, NOW)),
            ]);
            own.push(mine!);
            others.forEach((decision, i) => theirs[i]!.push(decision!));
            advance(100);
          }
          assert.deepEqual(own.map(fields), SIXTY_OF_100);
          assert.ok(own.every((decision) => !guard.answeredByPolicy(decision)));
          assert.deepEqual(incidents, [], "no incident: the namespace is up");
          assert.equal(guard.breakerState, "closed");
          for (const answers of theirs) {
            assert.ok(answers.every((decision) => guard.answeredByPolicy(decision)));
            assert.deepEqual(
              answers.map(fields),
              onError === "open" ? SIXTY_OF_100 : answers.map(() => UNAVAILABLE),
            );
          }
          // Each attacker's object: 5 failures trip its breaker, then one probe a second.
          for (const key of keys) {
            const calls = objects.calls.get(key)!;
            assert.ok(calls <= 16, `${key}'s object was called ${calls} times for 100 requests`);
          }
          const canaryChecks = objects.calls.get("canary:0") ?? 0;
          const most = Math.max(...keys.map((key) => objects.calls.get(key)!));
          // deno-lint-ignore no-console
          console.log(
            `${attackers} ${fault} ${onError}: an attacker's object called ${most} times at most, the canaries checked ${canaryChecks} times`,
          );
          assert.ok(
            canaryChecks >= 1 && canaryChecks <= 11,
            `${canaryChecks} canary checks in 10 s`,
          );
          assert.equal(guard.answeredForObject, attackers * 100);
          // Each attacker said once (a window is 60 s), ten at most, by its /24 only.
          assert.equal(notices.length, Math.min(attackers, MAX_CALLER_NOTICES));
          assert.ok(
            notices.every((notice) => /^(203\.0\.113|198\.51\.100)\.0$/.test(notice.caller)),
          );
          assert.equal(notices.filter((notice) => notice.last).length, attackers >= 10 ? 1 : 0);
        },
      );
    }
  }
}

Deno.test("a caller whose own object fails is no way around the limit: 60 a window by the isolate's count under open, said once a window; no admission under closed", async () => {
  for (const onError of ["open", "closed"] as const) {
    const { objects, guard, notices, advance } = objectsGuard(onError);
    objects.faults.set("2001:db8:aa:bb::/64", "overloaded");
    const admitted: number[] = [];
    for (let window = 0; window < 3; window++) {
      let count = 0;
      for (let i = 0; i < 2_000; i++) {
        const decision = await guard.hit("2001:db8:aa:bb::/64", NOW + window * 60_000);
        if (decision.allowed) count++;
      }
      admitted.push(count);
      advance(60_000);
    }
    assert.deepEqual(admitted, onError === "open" ? [60, 60, 60] : [0, 0, 0], onError);
    assert.deepEqual(notices.map((notice) => notice.caller), [
      "2001:db8:aa::",
      "2001:db8:aa::",
      "2001:db8:aa::",
    ]);
    assert.equal(notices[0]!.error, `Error: ${OVERLOADED}`);
    assert.ok(!JSON.stringify(notices).includes("2001:db8:aa:bb"), "never the full address");
  }
});

Deno.test("callers whose objects fail are named ten a window at most; the answers to the others are counted and said with the next window's first line", async () => {
  const { objects, guard, notices, advance } = objectsGuard("closed");
  const keys = attackerKeys(30);
  for (const key of keys) objects.faults.set(key, "overloaded");
  for (const key of keys) await guard.hit(key, NOW);
  for (const key of keys) await guard.hit(key, NOW);
  assert.equal(notices.length, MAX_CALLER_NOTICES);
  assert.equal(notices.at(-1)!.last, true);
  advance(60_000);
  await guard.hit(keys[0]!, NOW);
  assert.equal(notices.length, MAX_CALLER_NOTICES + 1);
  // 20 callers not named, each answered twice in the first window.
  assert.equal(notices.at(-1)!.unnamedBefore, 40);
});

for (const callers of [1, 1000]) {
  for (const fault of ["overloaded", "stall"] as const) {
    for (const onError of ["open", "closed"] as const) {
      Deno.test(
        `a namespace outage (every object ${fault}), ${callers} caller${
          callers > 1 ? "s" : ""
        }, ${onError}: one incident and the breaker open within two store timeouts of the first failed call; no object called until the canaries answer again`,
        async () => {
          const { objects, guard, incidents, reported, notices, advance } = objectsGuard(onError);
          // What as many requests at once take here without an outage (this machine is shared).
          const healthy = performance.now();
          await Promise.all(
            Array.from({ length: callers }, (_, i) => guard.hit(`10.1.${i >> 8}.${i & 255}`, NOW)),
          );
          const baseline = performance.now() - healthy;
          objects.down = fault;
          const keys = Array.from({ length: callers }, (_, i) => `10.0.${i >> 8}.${i & 255}`);
          const started = performance.now();
          await Promise.all(keys.map((key) => guard.hit(key, NOW)));
          const detectedMs = reported[0]! - started;
          // deno-lint-ignore no-console
          console.log(
            `${fault} ${onError} ${callers}: the outage known after ${detectedMs.toFixed(0)} ms (${
              baseline.toFixed(0)
            } ms for as many requests, healthy)`,
          );
          assert.equal(incidents.length, 1, JSON.stringify(incidents));
          assert.deepEqual(incidents[0], {
            kind: "unavailable",
            policy: onError,
            error: fault === "overloaded"
              ? `Error: ${OVERLOADED}`
              : `StoreTimeoutError: rate-limit store did not answer within ${TIMEOUT_MS} ms`,
          });
          assert.equal(guard.breakerState, "open");
          assert.equal(guard.healthy, false);
          // Within what the wave takes anyway, plus two timeouts (the caller's call, then the
          // canaries at once), each extended at most MAX_EXTENSIONS times while the loop is busy.
          const bound = baseline + 2 * (1 + MAX_EXTENSIONS) * TIMEOUT_MS;
          assert.ok(detectedMs < bound, `detected after ${detectedMs} ms, over ${bound} ms`);
          // Callers that failed while the canaries were asked: named ten at most.
          assert.ok(
            notices.length <= Math.min(callers - 1, MAX_CALLER_NOTICES),
            `${notices.length}`,
          );
          const calls = objects.callsOf("10.0.");
          const canaries = objects.callsOf("canary:");
          // Down: answered at once by the policy, no object called, the incident said once.
          for (let i = 0; i < 3; i++) {
            const answers = await Promise.all(keys.map((key) => guard.hit(key, NOW)));
            assert.ok(answers.every((decision) => guard.failureAnswer(decision) === onError));
          }
          assert.equal(objects.callsOf("10.0."), calls);
          assert.equal(objects.callsOf("canary:"), canaries);
          assert.equal(incidents.length, 1);
          // A probe interval later one request asks the canaries again (still down: no new line).
          advance(1000);
          await guard.hit(keys[0]!, NOW);
          assert.equal(objects.callsOf("canary:"), canaries + 2);
          assert.equal(incidents.length, 1);
          assert.equal(guard.breakerState, "open");
          // Back: the next probe finds a canary answering, and that request is its object's answer.
          objects.down = undefined;
          advance(1000);
          const back = await guard.hit("192.0.2.200", NOW);
          assert.deepEqual(fields(back), { allowed: true, remaining: 59, resetSeconds: 60 });
          assert.equal(incidents.length, 2);
          assert.equal(incidents[1]!.kind, "recovered");
          assert.equal(guard.breakerState, "closed");
        },
      );
    }
  }
}
