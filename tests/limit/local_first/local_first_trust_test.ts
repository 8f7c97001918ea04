/**
 * `local-first` over a log it cannot trust (issue 39), with logs in this process: a hit stamped in
 * this instance's future is recorded at its now and counted; a batch or entry that cannot be read
 * costs that batch, is counted and reported once per episode; nothing a log returns throws out of a
 * sync or its loop; a replay a log returns a chunk at a time is read on; the peers' stamps tell
 * whose clock is wrong (`PeerClocks`). The real instances are in `tests/shared_log_trust_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { HitWriter } from "../../../lib/limit/local_first/hit_codec.ts";
import type { HitLog, LogBatch, LogHealth } from "../../../lib/limit/core/hit_log.ts";
import {
  LocalFirstStore,
  type SyncIncident,
} from "../../../lib/limit/local_first/local_first_store.ts";
import { PEER_MEMORY_MS, PeerClocks } from "../../../lib/limit/clock/peer_clocks.ts";

const T0 = 1_700_000_000_000;
const POLICY = { limit: 60, windowMs: 60_000 };
const DAY_MS = 86_400_000;

/** A log that returns, at each exchange, the next reply of `replies`, and counts what it met. */
function scripted(replies: unknown[], health?: LogHealth): HitLog & { more: boolean } {
  return {
    maxBatchBytes: 65_536,
    roundTrips: 0,
    more: false,
    ...(health === undefined ? {} : { health }),
    exchange() {
      return Promise.resolve((replies.shift() ?? []) as LogBatch[]);
    },
    close() {},
  };
}

function batchOf(instance: string, seq: number, hits: Array<[string, number]>): LogBatch {
  const writer = new HitWriter(65_536);
  for (const [key, t] of hits) assert.ok(writer.append(key, t));
  return { instance, seq, hits: writer.take() };
}

function storeOver(log: HitLog, incidents: SyncIncident[], clock = () => T0): LocalFirstStore {
  return new LocalFirstStore(log, POLICY, {
    syncMs: 50,
    syncTimeoutMs: 1000,
    autoSync: false,
    clock,
    onIncident: (incident) => incidents.push(incident),
  });
}

Deno.test("local-first records a peer's hit stamped a day ahead at its now: it holds the caller one window, no more", async () => {
  const incidents: SyncIncident[] = [];
  const forged = batchOf("forger", 0, Array.from({ length: 60 }, () => ["192.0.2.1", T0 + DAY_MS]));
  let now = T0;
  const store = storeOver(scripted([[forged]]), incidents, () => now);
  await store.sync();
  const refused = store.hit("192.0.2.1", now);
  assert.equal(refused.allowed, false);
  assert.ok(refused.resetSeconds <= POLICY.windowMs / 1000, `held ${refused.resetSeconds} s`);
  assert.equal(store.stats().futureHits, 60);
  now += POLICY.windowMs + 1;
  assert.equal(store.hit("192.0.2.1", now).allowed, true, "still held after a window");
  assert.deepEqual(incidents.filter((i) => i.kind === "untrusted").map((i) => i.cause), ["future"]);
  await store.close();
});

Deno.test("local-first keeps a peer's hit stamped within the tolerance at its own time", async () => {
  const store = storeOver(scripted([[batchOf("p", 0, [["192.0.2.2", T0 + 500]])]]), []);
  await store.sync();
  assert.equal(store.stats().futureHits, 0);
  assert.equal(store.peek("192.0.2.2", T0).remaining, POLICY.limit - 1);
  await store.close();
});

Deno.test("local-first skips a batch it cannot read, keeps syncing, and reports it once per episode", async () => {
  const incidents: SyncIncident[] = [];
  let now = T0;
  const garbage = { instance: "p", seq: 0, hits: Uint8Array.of(1, 0, 0) };
  const tooLong = { instance: "p", seq: 1, hits: new Uint8Array(65_537) };
  const good = batchOf("p", 2, [["192.0.2.3", T0]]);
  const store = storeOver(
    scripted([[garbage, tooLong, good], [null, { instance: "q" }], "not a list", [garbage]]),
    incidents,
    () => now,
  );
  await store.sync();
  await store.sync();
  assert.equal(store.stats().unreadBatches, 4);
  assert.equal(store.peek("192.0.2.3", now).remaining, POLICY.limit - 1, "the good batch counted");
  // A reply that is not a list is a failed exchange, not a throw.
  await store.sync();
  assert.equal(store.synced, false);
  now += 1000;
  await store.sync();
  assert.equal(store.synced, true);
  assert.deepEqual(
    incidents.filter((i) => i.kind === "untrusted").length,
    1,
    "one report for the episode",
  );
  // A window with nothing unreadable ends the episode.
  now += POLICY.windowMs + 1;
  await store.sync();
  assert.deepEqual(incidents.filter((i) => i.kind === "trusted"), [
    { kind: "trusted", cause: "unreadable", count: 5 },
  ]);
  await store.close();
});

Deno.test("local-first counts what the log itself skipped or saw tampered, and reports each once", async () => {
  const incidents: SyncIncident[] = [];
  const health: LogHealth = {
    unreadable: 0,
    unreadableReason: "",
    tampered: 0,
    tamperedReason: "",
  };
  const store = storeOver(scripted([], health), incidents);
  Object.assign(health, { unreadable: 2, unreadableReason: "not base64", tampered: 1 });
  health.tamperedReason = "a number set by another entry";
  await store.sync();
  health.unreadable = 3;
  await store.sync();
  const stats = store.stats();
  assert.equal(stats.unreadBatches, 3);
  assert.equal(stats.tamperedEntries, 1);
  assert.deepEqual(incidents.filter((i) => i.kind === "untrusted"), [
    { kind: "untrusted", cause: "unreadable", detail: "not base64" },
    { kind: "untrusted", cause: "tampered", detail: "a number set by another entry" },
  ]);
  await store.close();
});

Deno.test("local-first reads on while the log has more: one sync takes several chunks of a replay", async () => {
  const chunks = [0, 1, 2].map((n) => [batchOf("p", n, [[`192.0.2.${10 + n}`, T0]])]);
  const log = scripted([...chunks]);
  const exchange = log.exchange.bind(log);
  log.exchange = (mine) => {
    log.more = chunks.length > 1;
    chunks.shift();
    return exchange(mine);
  };
  const store = storeOver(log, []);
  assert.equal(store.caughtUp, true);
  await store.sync();
  assert.equal(store.caughtUp, true);
  assert.equal(store.stats().receivedHits, 3, "the three chunks in one sync");
  await store.close();
});

Deno.test("local-first's sync loop survives a log that answers something not a list", async () => {
  const incidents: SyncIncident[] = [];
  const log: HitLog = {
    maxBatchBytes: 65_536,
    roundTrips: 0,
    exchange: () => Promise.resolve(null as unknown as LogBatch[]),
    close() {},
  };
  const store = new LocalFirstStore(log, POLICY, {
    syncMs: 10,
    syncTimeoutMs: 1000,
    onIncident: (incident) => incidents.push(incident),
  });
  // The loop's own syncs run on timers: a rejection escaping them would fail this test.
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(store.synced, false);
  assert.equal(incidents.filter((i) => i.kind === "unsynced").length, 1);
  await store.close();
});

Deno.test("PeerClocks: two clocks cannot tell which is wrong; a majority can, both ways", () => {
  let mono = 0;
  const clocks = () => new PeerClocks({ toleranceMs: 1000, lagMs: 10_000, monotonic: () => mono });
  const healthy = clocks();
  assert.deepEqual(healthy.verdict(), { kind: "agree" });
  healthy.observe("ahead", T0 + DAY_MS, T0);
  assert.deepEqual(healthy.verdict(), {
    kind: "undecided",
    peers: [{ instance: "ahead", offsetMs: DAY_MS }],
  });
  healthy.observe("other", T0 - 80, T0);
  assert.deepEqual(healthy.verdict(), {
    kind: "peer",
    peers: [{ instance: "ahead", offsetMs: DAY_MS }],
  });
  // The instance ahead sees both others a day behind: it is the one that is wrong.
  const wrong = clocks();
  wrong.observe("a", T0 - 50, T0 + DAY_MS);
  wrong.observe("b", T0 - 120, T0 + DAY_MS);
  const verdict = wrong.verdict();
  assert.equal(verdict.kind, "self");
  assert.ok(verdict.kind === "self" && Math.abs(verdict.offsetMs - DAY_MS) < 200);
  // A peer whose stamps lag less than a working sync's delay agrees; one not heard from is forgotten.
  const slow = clocks();
  slow.observe("slow", T0 - 9000, T0);
  assert.deepEqual(slow.verdict(), { kind: "agree" });
  healthy.observe("other", T0, T0);
  mono += PEER_MEMORY_MS + 1;
  assert.deepEqual(healthy.verdict(), { kind: "agree" });
});

Deno.test("local-first's sync loop is timed by the monotonic clock: a stamp clock stepped back a day holds no sync", async () => {
  let stamps = T0;
  let exchanges = 0;
  let fifth: () => void = () => {};
  const fifthExchange = new Promise<void>((resolve) => fifth = resolve);
  const log: HitLog = {
    maxBatchBytes: 65_536,
    roundTrips: 0,
    exchange() {
      exchanges++;
      // The store's clock steps back a day during the first exchange (a failover, a bad sample).
      if (exchanges === 1) stamps -= DAY_MS;
      if (exchanges === 5) fifth();
      return Promise.resolve([]);
    },
    close() {},
  };
  const store = new LocalFirstStore(log, POLICY, {
    syncMs: 10,
    syncTimeoutMs: 1000,
    clock: () => stamps,
  });
  // Waited for, not timed: a loop held by the stamp clock would wait a day, far beyond 10 s (a
  // fixed 200 ms saw 3 exchanges once, with two suites on the two cores).
  let bound: ReturnType<typeof setTimeout> | undefined;
  const settled = await Promise.race([
    fifthExchange.then(() => true),
    new Promise<false>((resolve) => bound = setTimeout(() => resolve(false), 10_000)),
  ]);
  clearTimeout(bound);
  assert.ok(settled, `${exchanges} exchanges in 10 s at a 10 ms period`);
  await store.close();
});
