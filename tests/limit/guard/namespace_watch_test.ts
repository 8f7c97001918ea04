/**
 * The watch over a namespace of objects (`lib/limit/guard/namespace_watch.ts`): down only when every
 * canary fails, back when one answers, checked once a probe interval at most, one check at a time.
 * Its use by the guard, with callers' objects failing beside it: `failing_objects_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { NamespaceWatch } from "../../../lib/limit/guard/namespace_watch.ts";

/** A watch over canaries that each fail as `failing[i]` says, with a clock the test moves. */
function watchOf(failing: boolean[]) {
  let now = 0;
  const asked: number[] = [];
  const canaries = failing.map((_, i) => () => {
    asked.push(i);
    return failing[i] ? Promise.reject(new Error(`canary ${i} down`)) : Promise.resolve();
  });
  const watch = new NamespaceWatch({ canaries, probeIntervalMs: 1000, clock: () => now });
  return { watch, asked, advance: (ms: number) => (now += ms) };
}

Deno.test("the namespace is down only when every canary fails: one answering is a namespace up", async () => {
  const failing = [true, false];
  const { watch, asked } = watchOf(failing);
  assert.deepEqual(await watch.check(), { transition: undefined });
  assert.equal(watch.state, "closed");
  assert.deepEqual(asked, [0, 1], "all at once");
  failing[1] = true;
  const { watch: down } = watchOf(failing);
  const outcome = await down.check();
  assert.equal(outcome.transition, "tripped");
  assert.equal(String(outcome.error), "Error: canary 0 down");
  assert.equal(down.state, "open");
  assert.equal(down.down, true);
});

Deno.test("a check is due once a probe interval at most, and never while one is under way", async () => {
  const failing = [true, true];
  const { watch, asked, advance } = watchOf(failing);
  assert.equal(watch.due, true);
  const first = watch.check();
  assert.equal(watch.due, false, "one check at a time");
  await first;
  assert.equal(watch.due, false, "the interval starts when a check ends");
  advance(999);
  assert.equal(watch.due, false);
  advance(1);
  assert.equal(watch.due, true);
  // Down, a check is the probe: half-open while it runs, open again when the canaries still fail.
  const probe = watch.check();
  assert.equal(watch.state, "half-open");
  assert.deepEqual(await probe, { transition: undefined, error: new Error("canary 0 down") });
  assert.equal(watch.state, "open");
  advance(1000);
  failing[0] = false;
  assert.deepEqual(await watch.check(), { transition: "recovered" });
  assert.equal(watch.state, "closed");
  assert.equal(asked.length, 6);
});

Deno.test("a canary that throws at once or never answers (its bound is the caller's) counts as failing", async () => {
  const thrown = new NamespaceWatch({
    canaries: [() => {
      throw new TypeError("no stub");
    }],
    probeIntervalMs: 1000,
    clock: () => 0,
  });
  assert.equal((await thrown.check()).transition, "tripped");
  const late = new NamespaceWatch({
    canaries: [() => new Promise((_, reject) => setTimeout(() => reject(new Error("late")), 5))],
    probeIntervalMs: 1000,
    clock: () => 0,
  });
  assert.equal((await late.check()).transition, "tripped");
  assert.throws(
    () => new NamespaceWatch({ canaries: [], probeIntervalMs: 1000, clock: () => 0 }),
    RangeError,
  );
});
