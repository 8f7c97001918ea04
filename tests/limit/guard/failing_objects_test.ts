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
 * - A namespace outage: namespace_outage_test.ts (a latency bound, in the suite's second pass).
 *
 * The real store on workerd: `tests/workers/failing_objects_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Decision } from "../../../lib/limit/core/decision.ts";
import { MAX_CALLER_NOTICES } from "../../../lib/limit/guard/caller_notices.ts";
import { fields, NOW, objectsGuard, OVERLOADED } from "./_objects.ts";

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
