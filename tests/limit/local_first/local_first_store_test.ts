/**
 * `local-first`: a decision never waits for the store; the overshoot across instances stays within
 * {@linkcode overshootBound} (a fast-check property over simulated instances, exchanges, store
 * latency and restarts, checked against the exact sliding-window model); a store that is down leaves
 * each instance limiting by what it knows; recovery sends the backlog; the backlog is bounded.
 *
 * The simulation drives the real {@linkcode LocalFirstStore} with an injected clock and a hit log
 * whose round trips take simulated time; the real stores over Redis and KV are in
 * `local_first_shared_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import type { Decision, RateLimitPolicy } from "../../../lib/limit/core/decision.ts";
import { MemoryStore } from "../../../lib/limit/memory/memory_store.ts";
import {
  LocalFirstStore,
  MAX_EXCHANGES_PER_SYNC,
  overshootBound,
  type SyncIncident,
} from "../../../lib/limit/local_first/local_first_store.ts";
import { decodeHits } from "../../../lib/limit/local_first/hit_codec.ts";
import { SharedBatches } from "../_shared_hit_log.ts";

const WINDOW_MS = 1000;
const NUM_RUNS = 150;

/** A discrete-event clock: callbacks run in time order; microtasks drain after each. */
class Simulation {
  now = 0;
  #queue: Array<{ at: number; seq: number; run: () => void }> = [];
  #seq = 0;

  at(time: number, run: () => void): void {
    this.#queue.push({ at: time, seq: this.#seq++, run });
    this.#queue.sort((a, b) => a.at - b.at || a.seq - b.seq);
  }

  async runUntil(end: number): Promise<void> {
    while (this.#queue.length > 0 && this.#queue[0]!.at <= end) {
      const event = this.#queue.shift()!;
      this.now = event.at;
      event.run();
      // Let the store apply a reply before time moves on.
      for (let i = 0; i < 100; i++) await Promise.resolve();
    }
    this.now = end;
  }
}

interface Scenario {
  limit: number;
  instances: number;
  syncMs: number;
  rttMs: number;
  /** The window (default {@linkcode WINDOW_MS}). */
  windowMs?: number;
  /** Requests of one caller: time and the instance it reaches. */
  requests: Array<{ t: number; instance: number }>;
  /**
   * When an instance's process is replaced (a restart, a one-port handover): the old store closes
   * (flushing what it has not sent) and a new one, with a new id and an empty memory store, reads
   * the log (its first exchange) before it takes requests; the requests that reach the instance
   * meanwhile are refused at the door (connection refused), not admitted.
   */
  restarts?: Array<{ t: number; instance: number }>;
}

interface Outcome {
  admitted: Array<{ t: number; instance: number }>;
  staleMs: number;
  roundTrips: number;
}

/** Runs `scenario` on `instances` real stores sharing one simulated hit log. */
async function simulate(scenario: Scenario): Promise<Outcome> {
  const sim = new Simulation();
  const windowMs = scenario.windowMs ?? WINDOW_MS;
  const policy: RateLimitPolicy = { limit: scenario.limit, windowMs };
  const shared = new SharedBatches(() => sim.now, windowMs);
  const logs: Array<{ roundTrips: number }> = [];
  const open = (id: string) => {
    const log = shared.log({ delay: (run) => sim.at(sim.now + scenario.rttMs / 2, run) });
    logs.push(log);
    return new LocalFirstStore(log, policy, {
      syncMs: scenario.syncMs,
      syncTimeoutMs: 1e9,
      clock: () => sim.now,
      autoSync: false,
      instance: id,
    });
  };
  const stores = Array.from({ length: scenario.instances }, (_, i) => open(`i${i}`));
  const ready = new Set<LocalFirstStore>(stores);
  const closed = new Set<LocalFirstStore>();
  // The real store's loop: one sync in flight, starts at least `syncMs` apart.
  const tick = (store: LocalFirstStore) => {
    if (closed.has(store)) return;
    const started = sim.now;
    void store.sync().finally(() => {
      ready.add(store);
      sim.at(sim.now + Math.max(0, scenario.syncMs - (sim.now - started)), () => tick(store));
    });
  };
  stores.forEach((store, i) =>
    sim.at((i * scenario.syncMs) / scenario.instances, () => tick(store))
  );
  // Scheduled before the requests: a request at the time of a restart reaches the new process.
  (scenario.restarts ?? []).forEach((restart, k) => {
    sim.at(restart.t, () => {
      const old = stores[restart.instance]!;
      closed.add(old);
      void old.close();
      const replacement = open(`i${restart.instance}r${k}`);
      stores[restart.instance] = replacement;
      tick(replacement);
    });
  });
  const admitted: Outcome["admitted"] = [];
  for (const request of scenario.requests) {
    sim.at(request.t, () => {
      const store = stores[request.instance]!;
      if (!ready.has(store)) return;
      if (store.hit("caller", sim.now).allowed) admitted.push(request);
    });
  }
  const end = Math.max(0, ...scenario.requests.map((r) => r.t)) + 1;
  await sim.runUntil(end + 4 * scenario.rttMs + 2 * scenario.syncMs);
  admitted.sort((a, b) => a.t - b.t);
  const staleMs = 2 * Math.max(scenario.syncMs, scenario.rttMs) + scenario.rttMs;
  return { admitted, staleMs, roundTrips: logs.reduce((n, log) => n + log.roundTrips, 0) };
}

const scenarioArbitrary = fc.record({
  limit: fc.integer({ min: 1, max: 20 }),
  instances: fc.integer({ min: 1, max: 4 }),
  syncMs: fc.integer({ min: 5, max: 100 }),
  rttMs: fc.integer({ min: 0, max: 120 }).map((ms) => ms - (ms % 2)),
  requests: fc.array(
    fc.record({ t: fc.integer({ min: 0, max: 3000 }), instance: fc.nat(3) }),
    { maxLength: 200 },
  ),
  restarts: fc.array(
    fc.record({ t: fc.integer({ min: 0, max: 3000 }), instance: fc.nat(3) }),
    { maxLength: 3 },
  ),
}).map((s) => ({
  ...s,
  requests: s.requests
    .map((r) => ({ t: r.t, instance: r.instance % s.instances }))
    .sort((a, b) => a.t - b.t),
  restarts: s.restarts.map((r) => ({ t: r.t, instance: r.instance % s.instances })),
}));

/** Which process of `instance` served a request at `t`: restarts so far (see `Scenario.restarts`). */
function generation(scenario: Scenario, instance: number, t: number): number {
  return (scenario.restarts ?? []).filter((r) => r.instance === instance && r.t <= t).length;
}

Deno.test("local-first admits at most limit + the requests the other processes took in the last D, in any window, across restarts", async () => {
  await fc.assert(
    fc.asyncProperty(scenarioArbitrary, async (scenario) => {
      const { admitted, staleMs } = await simulate(scenario);
      // Every process that served the caller counts as an instance: a restarted one is a new one.
      const processes = scenario.instances + (scenario.restarts?.length ?? 0);
      const cap = (processes - 1) * scenario.limit;
      const processOf = (r: { t: number; instance: number }) =>
        `${r.instance}:${generation(scenario, r.instance, r.t)}`;
      for (const last of admitted) {
        const inWindow = admitted.filter((a) => a.t > last.t - WINDOW_MS && a.t <= last.t).length;
        // What the deciding process could not have seen: the other processes' admitted requests
        // of the last D (a restarted process read the log before its first request).
        const unseen = admitted.filter((r) =>
          processOf(r) !== processOf(last) && r.t >= last.t - staleMs && r.t <= last.t
        ).length;
        const bound = scenario.limit + Math.min(unseen, cap);
        assert.ok(
          inWindow <= bound,
          `${inWindow} admitted in the window ending at ${last.t}, bound ${bound}`,
        );
      }
    }),
    { numRuns: NUM_RUNS },
  );
});

Deno.test("local-first on one instance decides exactly as the in-memory sliding window", async () => {
  await fc.assert(
    fc.asyncProperty(scenarioArbitrary, async (scenario) => {
      const single = {
        ...scenario,
        restarts: [],
        instances: 1,
        requests: scenario.requests.map((r) => ({ ...r, instance: 0 })),
      };
      const { admitted } = await simulate(single);
      const model = new MemoryStore({ limit: scenario.limit, windowMs: WINDOW_MS }, {
        sweep: false,
      });
      const expected = single.requests.filter((r) => model.hit("caller", r.t).allowed);
      assert.deepEqual(admitted, expected);
    }),
    { numRuns: NUM_RUNS },
  );
});

Deno.test("local-first stays within overshootBound when a caller alternates over two instances at 50/s", async () => {
  // The scenario (a): 50 requests/s for 4 s, limit 60, a store 80 ms away, syncs every 50 ms.
  const requests = Array.from({ length: 200 }, (_, i) => ({ t: i * 20, instance: i % 2 }));
  const scenario = { limit: 60, windowMs: 60_000, instances: 2, syncMs: 50, rttMs: 80, requests };
  const { admitted } = await simulate(scenario);
  const bound = overshootBound({
    limit: 60,
    ratePerSecond: 50,
    instances: 2,
    syncMs: 50,
    rttMs: 80,
  });
  assert.equal(bound, 6);
  assert.ok(admitted.length >= 60 && admitted.length <= 60 + bound, `admitted ${admitted.length}`);
});

Deno.test("overshootBound is capped by what the other instances can admit on their own", () => {
  assert.equal(
    overshootBound({ limit: 60, ratePerSecond: 1e6, instances: 3, syncMs: 50, rttMs: 80 }),
    120,
  );
  assert.equal(
    overshootBound({ limit: 60, ratePerSecond: 1e6, instances: 1, syncMs: 50, rttMs: 80 }),
    0,
  );
  // An uneven spread: the whole rate may come from the others.
  assert.equal(
    overshootBound({ limit: 60, ratePerSecond: 100, instances: Infinity, syncMs: 10, rttMs: 1 }),
    3,
  );
});

const POLICY: RateLimitPolicy = { limit: 60, windowMs: 60_000 };
const T0 = 1_700_000_000_000;

/** Two stores on one shared log, exchanged by hand, at a clock the test moves. */
function pair(options: { maxBacklogBytes?: number; maxBatchBytes?: number } = {}) {
  const clock = { now: T0 };
  const shared = new SharedBatches(() => clock.now, POLICY.windowMs);
  const incidents: SyncIncident[] = [];
  const open = (instance: string) => {
    const log = shared.log(
      options.maxBatchBytes === undefined ? {} : { maxBatchBytes: options.maxBatchBytes },
    );
    const store = new LocalFirstStore(log, POLICY, {
      syncMs: 250,
      syncTimeoutMs: 1000,
      autoSync: false,
      clock: () => clock.now,
      instance,
      onIncident: (incident) => incidents.push(incident),
      ...(options.maxBacklogBytes === undefined
        ? {}
        : { maxBacklogBytes: options.maxBacklogBytes }),
    });
    return { store, log };
  };
  return { clock, shared, incidents, open };
}

/** Hits held by the batches in the shared log, by caller. */
function heldBy(shared: SharedBatches): Map<string, number> {
  const held = new Map<string, number>();
  for (const { batch } of shared.batches) {
    decodeHits(batch.hits, (key) => held.set(key, (held.get(key) ?? 0) + 1));
  }
  return held;
}

Deno.test("local-first answers every request at once, also a caller's first: no request waits for the store", () => {
  const { open } = pair();
  const { store, log } = open("a");
  for (let i = 0; i < 1000; i++) {
    const decision: Decision | Promise<Decision> = store.hit(`10.0.${i >> 8}.${i & 255}`, T0);
    assert.ok(!(decision instanceof Promise));
  }
  assert.equal(log.roundTrips, 0, "nothing was asked of the store");
});

Deno.test("local-first sends the hits admitted during an outage once the store answers, reports the outage once, and refuses nobody for it", async () => {
  const { clock, shared, incidents, open } = pair();
  const { store } = open("a");
  shared.down = true;
  for (let i = 0; i < 5; i++) store.hit("192.0.2.1", clock.now++);
  await store.sync();
  store.hit("192.0.2.1", clock.now++);
  await store.sync();
  assert.equal(store.synced, false);
  assert.equal(
    store.backlog,
    2,
    "two batches wait: one sealed by the failed sync, one being filled",
  );
  shared.down = false;
  clock.now += 500;
  await store.sync();
  assert.equal(store.synced, true);
  assert.equal(store.backlog, 0);
  assert.equal(heldBy(shared).get("192.0.2.1"), 6, "every admitted hit is in the store, once");
  assert.deepEqual(incidents.map((i) => i.kind), ["unsynced", "resynced"]);
  assert.deepEqual(incidents[1], { kind: "resynced", downMs: 501, failedSyncs: 2 });
  assert.equal(store.hit("192.0.2.1", clock.now).remaining, 60 - 7);
  await store.close();
});

Deno.test("local-first: a batch whose exchange timed out is sent again with its number and kept once", async () => {
  const { clock, shared, open } = pair();
  const { store } = open("a");
  const reader = open("b");
  store.hit("192.0.2.1", clock.now);
  // The store does not answer in time, then does: the batch landed, its reply was lost.
  const log = shared.log();
  let first = true;
  const slow = new LocalFirstStore(
    {
      maxBatchBytes: log.maxBatchBytes,
      get roundTrips() {
        return log.roundTrips;
      },
      exchange(mine) {
        const reply = log.exchange(mine);
        if (!first) return reply;
        first = false;
        return reply.then((r) => new Promise((resolve) => setTimeout(() => resolve(r), 100)));
      },
      close: () => log.close(),
    },
    POLICY,
    { syncMs: 250, syncTimeoutMs: 20, autoSync: false, clock: () => clock.now, instance: "s" },
  );
  slow.hit("192.0.2.2", clock.now);
  await slow.sync();
  assert.equal(slow.synced, false, "timed out");
  await slow.sync();
  assert.equal(
    slow.stats().failedSyncs,
    2,
    "no exchange starts while the one timed out is unsettled",
  );
  await new Promise((resolve) => setTimeout(resolve, 150));
  await slow.sync();
  assert.equal(slow.synced, true);
  await reader.store.sync();
  assert.equal(heldBy(shared).get("192.0.2.2"), 1, "sent twice, kept once");
  assert.equal(reader.store.peek("192.0.2.2", clock.now).remaining, 59);
  await Promise.all([store.close(), reader.store.close(), slow.close()]);
});

Deno.test("local-first: the backlog is bounded; past it hits are decided but not sent, counted, and reported once per episode", async () => {
  const { clock, shared, incidents, open } = pair({ maxBacklogBytes: 4096, maxBatchBytes: 2048 });
  const { store } = open("a");
  shared.down = true;
  await store.sync();
  let admitted = 0;
  for (let i = 0; i < 2000; i++) {
    if (store.hit(`10.1.${i >> 8}.${i & 255}`, clock.now).allowed) admitted++;
  }
  assert.equal(admitted, 2000, "decided here, whatever the store");
  const stats = store.stats();
  // The bound, plus the one hit that crossed it (6 bytes an IPv4 hit).
  assert.ok(stats.backlogBytes <= 4096 + 6, `backlog ${stats.backlogBytes} bytes`);
  assert.ok(stats.droppedHits > 1000, `dropped ${stats.droppedHits}`);
  assert.deepEqual(incidents.map((i) => i.kind), ["unsynced", "overflowing"]);
  assert.match((incidents[1] as { cause: string }).cause, /unreachable/);
  shared.down = false;
  await store.sync();
  assert.equal(store.backlog, 0);
  assert.deepEqual(incidents.map((i) => i.kind), [
    "unsynced",
    "overflowing",
    "resynced",
    "caught-up",
  ]);
  const caught = incidents.at(-1) as { kind: string; droppedHits: number };
  assert.equal(caught.droppedHits, stats.droppedHits);
  // Nothing lost that was not counted: what the store holds plus what was dropped is what was admitted.
  let held = 0;
  for (const n of heldBy(shared).values()) held += n;
  assert.equal(held + store.stats().droppedHits, admitted);
  await store.close();
});

Deno.test("local-first sends a spray's backlog in up to MAX_EXCHANGES_PER_SYNC batches per sync, and every admitted hit reaches the store", async () => {
  const { clock, shared, open } = pair({ maxBatchBytes: 4096 });
  const { store, log } = open("a");
  const n = 20_000;
  for (let i = 0; i < n; i++) {
    store.hit(
      `2001:0db8:${(i >> 16).toString(16).padStart(4, "0")}:${
        (i & 0xffff).toString(16).padStart(4, "0")
      }::/64`,
      clock.now,
    );
    if (i % 1000 === 999) clock.now++;
  }
  await store.sync();
  assert.equal(log.roundTrips, MAX_EXCHANGES_PER_SYNC);
  while (store.backlog > 0) await store.sync();
  let held = 0;
  for (const count of heldBy(shared).values()) held += count;
  assert.equal(held, n);
  assert.equal(store.stats().sentHits, n);
  assert.equal(store.stats().droppedHits, 0);
  await store.close();
});

Deno.test("local-first: a process that starts reads the last window first, and one that stops flushes its batches: a restart keeps the count", async () => {
  const { clock, open } = pair();
  const a = open("a");
  await a.store.sync();
  for (let i = 0; i < 40; i++) a.store.hit("192.0.2.7", clock.now);
  clock.now += 100;
  await a.store.close(); // flushes the 40 hits not yet sent
  const a2 = open("a2");
  await a2.store.sync(); // the first exchange: before the service listens
  let admitted = 0;
  for (let i = 0; i < 60; i++) if (a2.store.hit("192.0.2.7", clock.now).allowed) admitted++;
  assert.equal(admitted, 20);
  // A window later the caller is free again.
  clock.now += 60_001;
  assert.equal(a2.store.hit("192.0.2.7", clock.now).allowed, true);
  await a2.store.close();
});

Deno.test("local-first peek reports the local and the others' counts without counting", async () => {
  const { clock, open } = pair();
  const a = open("a");
  const b = open("b");
  a.store.hit("192.0.2.1", clock.now - 1000);
  a.store.hit("192.0.2.1", clock.now - 500);
  await a.store.sync();
  await b.store.sync();
  b.store.hit("192.0.2.1", clock.now);
  assert.deepEqual(b.store.peek("192.0.2.1", clock.now), {
    allowed: true,
    remaining: 57,
    resetSeconds: 59,
  });
  assert.equal(b.store.peek("192.0.2.1", clock.now).remaining, 57, "nothing counted");
  await Promise.all([a.store.close(), b.store.close()]);
});

Deno.test("local-first's memory is the memory store's: a spray of 100,000 callers costs 34 B a caller plus the index at both instances, its backlog 10 B a hit, none once sent, and the cap holds", async () => {
  const callers = 100_000;
  const cap = 60_000;
  const clock = { now: T0 };
  const shared = new SharedBatches(() => clock.now, POLICY.windowMs);
  const capped: string[] = [];
  const open = (instance: string) =>
    new LocalFirstStore(shared.log({ maxBatchBytes: 256 * 1024 }), POLICY, {
      onCapacity: () => capped.push(instance),
      syncMs: 250,
      syncTimeoutMs: 1000,
      autoSync: false,
      clock: () => clock.now,
      instance,
      maxCallers: cap,
    });
  const a = open("a");
  const b = open("b");
  const key = (i: number) =>
    `2001:0db8:${(i >> 16).toString(16).padStart(4, "0")}:${
      (i & 0xffff).toString(16).padStart(4, "0")
    }::/64`;
  for (let i = 0; i < callers; i++) {
    a.hit(key(i), clock.now);
    if (i % 100 === 99) clock.now++;
  }
  // The backlog: one IPv6 /64 hit is 10 B packed (a 1-byte time delta), plus a header per batch.
  const backlog = a.stats().backlogBytes;
  assert.ok(backlog <= callers * 10 + 9 * 8, `${backlog} B of backlog for ${callers} hits`);
  while (a.backlog > 0) await a.sync();
  assert.equal(a.stats().backlogBytes, 0);
  await b.sync();
  assert.equal(b.stats().receivedHits, callers);
  // One request each: 25 B of entry and 9 B of log bookkeeping per caller tracked, and the index of
  // 4 B per slot (2^17 slots: the power of two at or above twice the cap).
  const index = 2 ** 17 * 4;
  for (const store of [a, b]) {
    const { tracked, evicted } = store.stats();
    assert.equal(tracked, cap, "the cap holds: the callers added longest ago are forgotten");
    assert.equal(evicted, callers - cap);
    const { bytes, logged } = store.memory();
    assert.equal(logged, 0, "one request each: no pooled log");
    assert.ok(bytes <= cap * (25 + 9) + index + 4096, `${bytes} B for ${tracked} callers`);
  }
  assert.deepEqual(capped, ["a", "b"], "the cap is reported once per episode at each instance");
  await Promise.all([a.close(), b.close()]);
});
