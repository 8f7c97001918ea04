/**
 * The decisions' clock where no store's clock decides (`lib/limit/clock/steady_clock.ts`): a step of the
 * wall clock does not move it (memory), or moves it at a bounded rate (Deno KV); and the memory and
 * KV stores stamp by it, not by the time they are passed.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { RateLimitPolicy } from "../../../lib/limit/core/decision.ts";
import { KvStore } from "../../../lib/limit/kv/kv_store.ts";
import { MemoryStore } from "../../../lib/limit/memory/memory_store.ts";
import { KV_SLEW_RATE, SteadyClock } from "../../../lib/limit/clock/steady_clock.ts";
import { clocks, T0 } from "../_clocks.ts";

const POLICY: RateLimitPolicy = { limit: 3, windowMs: 60_000 };

Deno.test("without slewing, the clock is the wall clock at start run by the monotonic clock: no step reaches it", () => {
  const t = clocks(500);
  const clock = new SteadyClock({ wall: t.wall, monotonic: t.monotonic });
  assert.equal(clock.now(), T0);
  t.pass(1000);
  t.step(30_000);
  assert.equal(clock.now(), T0 + 1000);
  t.step(-60_000);
  t.pass(500);
  assert.equal(clock.now(), T0 + 1500);
  t.pass(86_400_000);
  assert.equal(clock.now(), T0 + 1500 + 86_400_000, "never follows the wall clock");
});

Deno.test("readings are whole milliseconds, as Date.now() reads, never going back, from a monotonic clock with fractions", () => {
  for (const slewRate of [0, KV_SLEW_RATE]) {
    const t = clocks(500.375);
    const clock = new SteadyClock({ wall: t.wall, monotonic: t.monotonic, slewRate });
    const readings = [clock.now()];
    for (let i = 0; i < 40; i++) {
      t.pass(0.125);
      if (i === 20) t.step(-5);
      readings.push(clock.now());
    }
    assert.ok(readings.every(Number.isInteger), `slewRate ${slewRate}: ${readings}`);
    assert.ok(readings.every((r, i) => i === 0 || r >= readings[i - 1]!), `${readings}`);
    // 5 ms passed, read in whole milliseconds (slewing toward the stepped wall clock took back a
    // fraction of one).
    assert.equal(readings.at(-1)! - readings[0]!, slewRate === 0 ? 5 : 4);
  }
});

Deno.test("slewing, the clock follows a step at the rate given, never faster, never backwards", () => {
  for (const step of [30_000, -30_000]) {
    const t = clocks(500);
    const clock = new SteadyClock({
      wall: t.wall,
      monotonic: t.monotonic,
      slewRate: KV_SLEW_RATE,
      maxSlewMs: 60_000,
    });
    t.step(step);
    assert.equal(clock.now(), T0, `${step}: a step moves nothing at once`);
    let previous = clock.now();
    for (let s = 1; s <= 10; s++) {
      t.pass(1000);
      const now = clock.now();
      // 20 ms per second, the sign of the step.
      assert.equal(now - previous, 1000 + Math.sign(step) * 20, `${step}: second ${s}`);
      previous = now;
    }
    // Caught up after |step| / rate (25 min for 30 s), then runs with the wall clock again.
    t.pass(25 * 60_000);
    assert.equal(clock.now(), t.wall(), `${step}: caught up`);
    t.pass(1000);
    assert.equal(clock.now(), t.wall());
  }
});

Deno.test("slewing, an idle clock catches up what the time elapsed allows, at its next reading", () => {
  const t = clocks(500);
  const clock = new SteadyClock({ wall: t.wall, monotonic: t.monotonic, slewRate: 0.02 });
  t.step(30_000);
  t.pass(100_000);
  assert.equal(clock.now(), T0 + 100_000 + 2000);
});

Deno.test("slewing, a difference beyond maxSlewMs is stepped at once, as the wall clock was", () => {
  const t = clocks(500);
  const clock = new SteadyClock({
    wall: t.wall,
    monotonic: t.monotonic,
    slewRate: 0.02,
    maxSlewMs: 60_000,
  });
  t.pass(1000);
  t.step(3_600_000);
  assert.equal(clock.now(), t.wall());
  t.step(-61_000);
  assert.equal(clock.now(), t.wall());
});

Deno.test("the memory store with a clock stamps by it and sweeps by it, not by the time passed", () => {
  const t = clocks(500);
  const clock = new SteadyClock({ wall: t.wall, monotonic: t.monotonic });
  const store = new MemoryStore(POLICY, { clock: clock.now, sweep: false });
  for (let i = 0; i < 3; i++) assert.equal(store.hit("192.0.2.1", t.wall()).allowed, true);
  t.pass(10_000);
  t.step(55_000);
  // By the wall clock the window has passed; by the store's clock 50 s are left.
  assert.deepEqual(store.hit("192.0.2.1", t.wall()), {
    allowed: false,
    remaining: 0,
    resetSeconds: 50,
    resetMs: 50_000,
  });
  assert.deepEqual(store.peek("192.0.2.1", t.wall()), {
    allowed: false,
    remaining: 0,
    resetSeconds: 50,
  });
  t.step(-120_000);
  t.pass(50_000);
  // By the wall clock the window has 65 s to run; by the store's clock it is over.
  assert.equal(store.hit("192.0.2.1", t.wall()).allowed, true);
  store.close();
});

Deno.test("the KV store with a clock stamps by it, not by the time passed", async () => {
  const t = clocks(500);
  const clock = new SteadyClock({ wall: t.wall, monotonic: t.monotonic });
  const kv = await Deno.openKv(":memory:");
  const store = new KvStore(kv, POLICY, { clock: clock.now, ownsKv: true });
  try {
    for (let i = 0; i < 3; i++) assert.equal((await store.hit("192.0.2.1", 0)).allowed, true);
    t.pass(10_000);
    t.step(55_000);
    assert.deepEqual(await store.hit("192.0.2.1", t.wall()), {
      allowed: false,
      remaining: 0,
      resetSeconds: 50,
      resetMs: 50_000,
    });
    assert.equal((await store.peek("192.0.2.1", t.wall())).resetSeconds, 50);
  } finally {
    store.close();
  }
});
