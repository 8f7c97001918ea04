/**
 * The store's clock (`lib/limit/clock/store_clock.ts`): sampled as NTP does, filtered, jump-safe, and the
 * warning of an offset; with the real stores: Redis exact decides by `TIME` whatever the instance's
 * clock says, `local-first` stamps by the store's clock across a step of the wall clock, and Deno KV
 * shows a clock ahead by its stamps.
 *
 * @module
 */

import assert from "node:assert/strict";
import { loadConfig } from "../../../lib/config/config.ts";
import { type Env, recordEnv } from "../../../lib/config/env.ts";
import type { Decision, RateLimitPolicy } from "../../../lib/limit/core/decision.ts";
import { KvStore } from "../../../lib/limit/kv/kv_store.ts";
import { LocalFirstStore } from "../../../lib/limit/local_first/local_first_store.ts";
import type { HitLog, LogBatch } from "../../../lib/limit/core/hit_log.ts";
import { decodeHits, HitWriter } from "../../../lib/limit/local_first/hit_codec.ts";
import { KvHitLog } from "../../../lib/limit/kv/kv_hit_log.ts";
import { openRateLimitStore } from "../../../lib/limit/open_store.ts";
import { openRedisStore } from "../../../lib/limit/redis/redis_store.ts";
import { StoreClock } from "../../../lib/limit/clock/store_clock.ts";
import { stampedBy } from "../../../lib/limit/local_first/stamped.ts";
import { redisUnavailableReason, startRedis } from "../../_redis.ts";
import { clocks, T0 } from "../_clocks.ts";

const POLICY: RateLimitPolicy = { limit: 3, windowMs: 10_000 };

Deno.test("a sample reads the server's time at the round trip's midpoint, and the wall clock's steps do not move it", async () => {
  const t = clocks();
  const offsets: number[] = [];
  // The server is 5 s ahead; the read takes 40 ms, answered 10 ms after the server read its clock.
  const clock = new StoreClock({
    wall: t.wall,
    monotonic: t.monotonic,
    autoSample: false,
    onOffset: (ms) => offsets.push(ms),
    read: () => {
      t.pass(30);
      const server = t.c.wall + 5000;
      t.pass(10);
      return Promise.resolve(server);
    },
  });
  assert.equal(clock.now(), T0, "the wall clock until a first sample");
  assert.equal(clock.offsetMs(), undefined);
  await clock.sample();
  // Read at +30 of a 40 ms round trip: taken as the midpoint (+20), an error of 10 ms <= rtt/2.
  assert.equal(clock.now(), T0 + 40 + 5000 + 10);
  assert.equal(clock.offsetMs(), 5010);
  assert.deepEqual(offsets, [5010], "one warning");
  await clock.sample();
  assert.deepEqual(offsets, [5010], "still one warning for the same episode");

  const before = clock.now();
  t.step(30_000);
  assert.equal(clock.now(), before, "a step forward of the wall clock moves nothing");
  assert.equal(clock.offsetMs(), 5010 - 30_000, "but it is the offset now");
  t.step(-60_000);
  assert.equal(clock.now(), before, "nor a step back");
  t.pass(1000);
  assert.equal(clock.now(), before + 1000, "time passes by the monotonic clock");
});

Deno.test("after a sample, readings are whole milliseconds, as the wall clock's are, from a monotonic clock with fractions", async () => {
  const t = clocks(1000.375);
  const clock = new StoreClock({
    wall: t.wall,
    monotonic: t.monotonic,
    autoSample: false,
    read: () => {
      t.pass(0.25);
      return Promise.resolve(t.c.wall + 5000);
    },
  });
  await clock.sample();
  const readings = [clock.now()];
  for (let i = 0; i < 8; i++) {
    t.pass(0.25);
    readings.push(clock.now());
  }
  // Read at the round trip's midpoint: the store's time is 5000.375 ms ahead of T0 at the first
  // reading, then 0.25 ms more at each.
  assert.deepEqual(
    readings.map((r) => r - T0),
    [5000, 5000, 5000, 5001, 5001, 5001, 5001, 5002, 5002],
  );
});

Deno.test("the filter keeps the shortest round trip of the last samples, and drops slow ones", () => {
  const t = clocks();
  const clock = new StoreClock({ wall: t.wall, monotonic: t.monotonic, samples: 3 });
  // base = server - midpoint: 100 with a 200 ms round trip, 10 with 20 ms, 50 with 100 ms.
  clock.observe(1100 + 100, 1000, 1200);
  assert.equal(clock.now() - t.c.mono, 100);
  clock.observe(1310 + 10, 1300, 1320);
  assert.equal(clock.now() - t.c.mono, 10, "the shorter round trip wins");
  clock.observe(1450 + 50, 1400, 1500);
  assert.equal(clock.now() - t.c.mono, 10, "and keeps winning while it is among the last 3");
  clock.observe(1650 + 60, 1600, 1700);
  clock.observe(1850 + 70, 1830, 1870);
  assert.equal(clock.now() - t.c.mono, 70, "the 20 ms one aged out: the best of the last 3");
  clock.observe(9_000_000, 2000, 3500);
  assert.equal(clock.now() - t.c.mono, 70, "a 1.5 s round trip says too little: dropped");
  clock.observe(Number.NaN, 4000, 4001);
  assert.equal(clock.now() - t.c.mono, 70, "so is a reply that is no time");
});

Deno.test("the warning comes back only after the offset did", () => {
  const t = clocks();
  const offsets: number[] = [];
  const clock = new StoreClock({
    wall: t.wall,
    monotonic: t.monotonic,
    onOffset: (ms) => offsets.push(ms),
  });
  // A sample with no round trip at all, reading the server `offset` ms from the wall clock.
  const at = (offset: number) => clock.observe(t.c.wall + offset, t.c.mono, t.c.mono);
  at(900);
  assert.deepEqual(offsets, [], "under a second: nothing");
  at(-2500);
  assert.deepEqual(offsets, [-2500]);
  t.pass(10_000);
  for (let i = 0; i < 4; i++) at(-2000);
  assert.deepEqual(offsets, [-2500], "one line per episode");
  for (let i = 0; i < 4; i++) at(100);
  for (let i = 0; i < 4; i++) at(3000);
  assert.deepEqual(offsets, [-2500, 3000], "a new episode after it came back");
});

/** A hit log with no other instance, which keeps the batches sent to it. */
function lonelyLog(): HitLog & { batches: LogBatch[] } {
  const log = {
    roundTrips: 0,
    maxBatchBytes: 65536,
    batches: [] as LogBatch[],
    exchange(mine: LogBatch | null) {
      log.roundTrips++;
      if (mine !== null) log.batches.push(mine);
      return Promise.resolve([]);
    },
    close() {},
  };
  return log;
}

/** The hits of a batch, as key and time. */
function hitsOf(batch: LogBatch): Array<[string, number]> {
  const hits: Array<[string, number]> = [];
  decodeHits(batch.hits, (key, t) => hits.push([key, t]));
  return hits;
}

for (const stepMs of [30_000, -30_000]) {
  Deno.test(`local-first across a step of ${stepMs / 1000} s of the wall clock: never more than the limit, refused no longer than the window`, async () => {
    const t = clocks();
    const server = 777_000; // the store's clock: far from the instance's, as it may be
    const clock = new StoreClock({
      wall: t.wall,
      monotonic: t.monotonic,
      autoSample: false,
      read: () => Promise.resolve(t.c.mono + server),
    });
    await clock.sample();
    const log = lonelyLog();
    const store = stampedBy(
      new LocalFirstStore(log, POLICY, {
        syncMs: 50,
        syncTimeoutMs: 1000,
        autoSync: false,
        clock: () => clock.now(),
      }),
      clock,
    );
    try {
      // The handler passes the wall clock; the store is stamped by the store's clock instead.
      const hit = () => decided(store.hit("caller", t.c.wall));
      for (let i = 0; i < POLICY.limit; i++) assert.equal(hit().allowed, true);
      await store.sync();
      assert.deepEqual(hitsOf(log.batches[0]!)[0], ["caller", Math.round(t.c.mono + server)]);
      t.pass(2000);
      t.step(stepMs);
      // Every request until the window has passed is refused, whatever the wall clock says, and
      // its reset counts down by the store's clock.
      for (let elapsed = 2000; elapsed < POLICY.windowMs; elapsed += 1000) {
        const decision = hit();
        assert.equal(decision.allowed, false, `admitted ${elapsed} ms in`);
        assert.equal(decision.resetSeconds, (POLICY.windowMs - elapsed) / 1000);
        t.pass(1000);
      }
      // One window after the first hits: admitted again, not one step later.
      assert.equal(hit().allowed, true, "admitted when the window has passed");
    } finally {
      await store.close();
    }
  });
}

Deno.test("local-first stamped by the wall clock, as before, lets a step forward admit twice the limit", () => {
  // What the store's clock replaces: the same schedule, stamped by the wall clock the handler passes.
  const t = clocks();
  const store = new LocalFirstStore(lonelyLog(), POLICY, {
    syncMs: 50,
    syncTimeoutMs: 1000,
    autoSync: false,
    clock: t.wall,
  });
  let admitted = 0;
  const hit = () => decided(store.hit("caller", t.c.wall));
  for (let i = 0; i < POLICY.limit; i++) admitted += hit().allowed ? 1 : 0;
  t.pass(2000);
  t.step(30_000);
  for (let i = 0; i < POLICY.limit; i++) admitted += hit().allowed ? 1 : 0;
  assert.equal(admitted, 2 * POLICY.limit);
  void store.close();
});

Deno.test("Deno KV: a stamp another instance wrote in this one's future shows as the offset", async () => {
  const kv = await Deno.openKv(":memory:");
  const offsets: number[] = [];
  const t = clocks();
  const clock = new StoreClock({
    wall: t.wall,
    monotonic: t.monotonic,
    onOffset: (ms) => offsets.push(ms),
  });
  const ahead = new KvStore(kv, POLICY);
  const here = new KvStore(kv, POLICY, { onStamp: (newest) => clock.observeStamp(newest) });
  try {
    // The other instance's clock is 30 s ahead of this one's.
    await ahead.hit("caller", T0 + 30_000);
    assert.equal(clock.offsetMs(), undefined, "nothing seen yet");
    await here.hit("caller", T0);
    assert.equal(clock.offsetMs(), 30_000);
    assert.deepEqual(offsets, [30_000], "one warning");
    await here.hit("caller", T0);
    assert.deepEqual(offsets, [30_000]);
    // Stamps within a second are the ordinary spread of clocks: nothing.
    await ahead.hit("other", T0 + 800);
    await here.hit("other", T0);
    assert.equal(clock.offsetMs(), 30_000, "the lead seen is kept for a minute");
    t.pass(61_000);
    assert.equal(clock.offsetMs(), 0, "then forgotten");
  } finally {
    kv.close();
  }
});

const noRedis = redisUnavailableReason();
Deno.test({
  name: `Redis exact decides by the server's clock, whatever the instance's says${
    noRedis ? ` (ignored: ${noRedis})` : ""
  }`,
  ignore: noRedis !== undefined,
  async fn() {
    const redis = await startRedis();
    const samples: number[] = [];
    const store = await openRedisStore(redis.url, POLICY, {
      onServerTime: (server, sent, received) => {
        assert.ok(received >= sent);
        samples.push(server - Date.now());
      },
    });
    try {
      // One instance 30 s ahead, one 30 s behind: one log, one clock.
      for (let i = 0; i < POLICY.limit; i++) {
        const decision = await store.hit("caller", Date.now() + 30_000);
        assert.equal(decision.allowed, true);
        assert.equal(decision.resetSeconds, 10, "the window by the server's clock");
      }
      const refused = await store.hit("caller", Date.now() - 30_000);
      assert.equal(refused.allowed, false);
      assert.ok(refused.resetSeconds >= 9 && refused.resetSeconds <= 10, `${refused.resetSeconds}`);
      const peeked = await store.peek("caller", Date.now() + 60_000);
      assert.equal(peeked.allowed, false, "a peek by the server's clock too");
      assert.equal(samples.length, POLICY.limit + 2, "every reply carries the server's time");
      assert.ok(samples.every((ms) => Math.abs(ms) < 1000), `${samples}`);
    } finally {
      await store.close();
      await redis.stop();
    }
  },
});

Deno.test("Deno KV local-first: one other instance's stamps in this instance's future are a disagreement it cannot settle, not its own offset", async () => {
  const dir = await Deno.makeTempDir();
  const result = loadConfig(
    recordEnv({
      RATE_LIMIT_STORE: "kv",
      KV_PATH: `${dir}/limit.sqlite3`,
      RATE_LIMIT: "3",
      RATE_LIMIT_CONSISTENCY: "local-first",
      RATE_LIMIT_SYNC_MS: "10",
    }) satisfies Env,
  );
  if (!result.ok) throw new Error(result.errors.join("; "));
  const offsets: number[] = [];
  const verdicts: string[] = [];
  // Another instance whose clock is 30 s ahead, as the hit log sees it: a writer of the same KV
  // file whose batch stamps a hit 30 s in the future (this instance's clock cannot be set apart,
  // since hits are stamped by the store's own clock, not the time passed). With two clocks,
  // which one is wrong cannot be told (issue 39): this instance must not blame itself.
  const ahead = new KvHitLog(await Deno.openKv(`${dir}/limit.sqlite3`), 60_000, {
    instance: "ahead",
    ownsKv: true,
  });
  const here = await openRateLimitStore(result.config, {
    onClockOffset: (ms) => offsets.push(ms),
    onSyncIncident: (incident) => {
      if (incident.kind === "clock") verdicts.push(incident.verdict.kind);
    },
  }) as LocalFirstStore & { clockOffsetMs(): number | undefined };
  try {
    const writer = new HitWriter(4096);
    assert.ok(writer.append("caller", Date.now() + 30_000));
    await ahead.exchange({ instance: "ahead", seq: 0, hits: writer.take() });
    await here.hit("caller", Date.now());
    // The loop's exchange (every 10 ms) may be in flight, begun before the other's batch was
    // written: `sync` then waits for that one. The exchange after it begins after the write.
    await here.sync();
    await here.sync();
    assert.deepEqual(offsets, [], "this instance blamed itself");
    assert.deepEqual(verdicts, ["undecided"]);
    assert.equal(here.clockOffsetMs() ?? 0, 0, "exported as this instance's offset");
    await here.sync();
    assert.deepEqual(verdicts, ["undecided"], "once per episode");
  } finally {
    await ahead.close();
    await here.close();
    await Deno.remove(dir, { recursive: true });
  }
});

/** A decision the store answered at once (a caller with a view never waits for the store). */
function decided(decision: Decision | Promise<Decision>): Decision {
  if (decision instanceof Promise) {
    throw new Error("the store waited where it should answer at once");
  }
  return decision;
}
