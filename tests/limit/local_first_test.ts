/**
 * `local-first`: a decision never waits for the store; the overshoot across instances stays within
 * {@linkcode overshootBound} (a fast-check property over simulated instances, syncs and store
 * latency, checked against the exact sliding-window model); a store that is down leaves each instance
 * limiting by its own log; recovery sends the queued hits without refusing anyone for it.
 *
 * The simulation drives the real {@linkcode LocalFirstStore} with an injected clock and a backend
 * whose round trips take simulated time; the real stores over Redis and KV are in
 * `local_first_shared_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import type { Decision, RateLimitPolicy } from "../../lib/limit/decision.ts";
import { MemoryStore } from "../../lib/limit/memory.ts";
import {
  LocalFirstStore,
  MAX_QUIET_CALLERS,
  MAX_SYNC_CALLERS,
  MAX_WAITING_CALLERS,
  overshootBound,
  SWEEP_PER_SYNC,
  type SyncBackend,
  type SyncBatch,
  type SyncIncident,
} from "../../lib/limit/local_first.ts";

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

/** The shared store: every instance's hits with their member ids, as Redis keeps them. */
class SimulatedBackend implements SyncBackend {
  roundTrips = 0;
  down = false;
  constructor(
    readonly sim: Simulation,
    readonly rttMs: number,
    readonly shared: Map<string, Map<string, { t: number; instance: string }>>,
    readonly windowMs: number,
  ) {}

  sync(batch: SyncBatch): Promise<Map<string, number[]>> {
    this.roundTrips++;
    return new Promise((resolve, reject) => {
      this.sim.at(this.sim.now + this.rttMs / 2, () => {
        if (this.down) {
          this.sim.at(this.sim.now + this.rttMs / 2, () => reject(new Error("connection refused")));
          return;
        }
        const reply = this.#apply(batch);
        this.sim.at(this.sim.now + this.rttMs / 2, () => resolve(reply));
      });
    });
  }

  #apply(batch: SyncBatch): Map<string, number[]> {
    const reply = new Map<string, number[]>();
    for (const [key, entry] of batch.callers) {
      let log = this.shared.get(key);
      if (log === undefined) this.shared.set(key, log = new Map());
      for (const [t, member] of entry.fresh) log.set(member, { t, instance: batch.instance });
      const others = [...log.values()]
        .filter((hit) => hit.instance !== batch.instance && hit.t > batch.now - this.windowMs)
        .map((hit) => hit.t);
      reply.set(key, others);
    }
    return reply;
  }

  close(): void {}
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
   * (flushing what it has not sent) and a new one, with a new id and an empty log, takes its
   * requests from that time on.
   */
  restarts?: Array<{ t: number; instance: number }>;
}

interface Outcome {
  admitted: Array<{ t: number; instance: number }>;
  staleMs: number;
  roundTrips: number;
}

/** Runs `scenario` on `instances` real stores syncing through one simulated backend. */
async function simulate(scenario: Scenario): Promise<Outcome> {
  const sim = new Simulation();
  const windowMs = scenario.windowMs ?? WINDOW_MS;
  const policy: RateLimitPolicy = { limit: scenario.limit, windowMs };
  const backend = new SimulatedBackend(sim, scenario.rttMs, new Map(), windowMs);
  const open = (id: string) =>
    new LocalFirstStore(backend, policy, {
      syncMs: scenario.syncMs,
      syncTimeoutMs: 1e9,
      clock: () => sim.now,
      autoSync: false,
      instance: id,
    });
  const stores = Array.from({ length: scenario.instances }, (_, i) => open(`i${i}`));
  const closed = new Set<LocalFirstStore>();
  // The real store's loop: one sync in flight, starts at least `syncMs` apart.
  const tick = (store: LocalFirstStore) => {
    if (closed.has(store)) return;
    const started = sim.now;
    void store.sync().finally(() => {
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
      // A caller new to the instance waits for the store's answer: decided when it comes back.
      void Promise.resolve(stores[request.instance]!.hit("caller", sim.now)).then((decision) => {
        if (decision.allowed) admitted.push(request);
      });
    });
  }
  const end = Math.max(0, ...scenario.requests.map((r) => r.t)) + 1;
  await sim.runUntil(end + 4 * scenario.rttMs + 2 * scenario.syncMs);
  admitted.sort((a, b) => a.t - b.t);
  const staleMs = 2 * Math.max(scenario.syncMs, scenario.rttMs) + scenario.rttMs;
  return { admitted, staleMs, roundTrips: backend.roundTrips };
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
      const { admitted, staleMs: steadyMs } = await simulate(scenario);
      // A request that waited for the store (a caller's first at a process) is queued for the next
      // sync only once decided: at most W = 2·max(syncMs, rtt) + 4·rtt after it arrived (the sync
      // in flight, one answer, a second read due a sync period and a round trip later, picked up by
      // the loop, and its answer). Its hit reaches the others within D + W.
      const { syncMs, rttMs } = scenario;
      const staleMs = steadyMs + 2 * Math.max(syncMs, rttMs) + 4 * rttMs;
      // Every process that served the caller counts as an instance: a restarted one is a new one.
      const processes = scenario.instances + (scenario.restarts?.length ?? 0);
      const cap = (processes - 1) * scenario.limit;
      const processOf = (r: { t: number; instance: number }) =>
        `${r.instance}:${generation(scenario, r.instance, r.t)}`;
      for (const last of admitted) {
        const inWindow = admitted.filter((a) => a.t > last.t - WINDOW_MS && a.t <= last.t).length;
        // What the deciding process could not have seen: the other processes' requests of the
        // last D. A caller new to it is decided once the store has answered, so this holds from
        // its first request (a restarted process included), not only after its first sync.
        const unseen = scenario.requests.filter((r) =>
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

/** A backend whose calls never settle, or fail, as the test chooses. */
class BrokenBackend implements SyncBackend {
  roundTrips = 0;
  mode: "hang" | "fail" | "answer" = "hang";
  received: SyncBatch[] = [];
  sync(batch: SyncBatch): Promise<Map<string, number[]>> {
    this.roundTrips++;
    if (this.mode === "hang") return new Promise(() => {});
    if (this.mode === "fail") return Promise.reject(new Error("connection refused"));
    this.received.push(batch);
    return Promise.resolve(new Map());
  }
  close(): void {}
}

/** A decision the store must have answered at once. */
function atOnce(decision: Decision | Promise<Decision>): Decision {
  assert.ok(!(decision instanceof Promise), "answered without waiting for the store");
  return decision;
}

Deno.test("local-first waits at most waitMs for a hanging store, then answers synchronously and still limits by its own log", async () => {
  const backend = new BrokenBackend();
  const store = new LocalFirstStore(backend, { limit: 3, windowMs: 60_000 }, {
    syncMs: 10,
    syncTimeoutMs: 1000,
    waitMs: 20,
    autoSync: false,
  });
  // A caller new here waits for the store's answer; the store hangs: decided locally after 20 ms.
  const started = performance.now();
  const first = store.hit("caller", 1000);
  assert.ok(first instanceof Promise);
  assert.equal((await first).remaining, 2);
  assert.ok(performance.now() - started < 500, "released after waitMs, not the sync timeout");
  assert.equal(store.stats().unfetched, 1);
  const decisions: Decision[] = [];
  for (let i = 1; i < 4; i++) decisions.push(atOnce(store.hit("caller", 1000 + i)));
  assert.deepEqual(decisions.map((d) => d.allowed), [true, true, false]);
  assert.deepEqual(decisions.map((d) => d.remaining), [1, 0, 0]);
  // A second new caller does not wait again while the store has not answered.
  assert.equal(atOnce(store.hit("other", 1005)).allowed, true);
});

Deno.test("local-first sends the hits admitted during an outage with the first sync that succeeds, and reports the outage once", async () => {
  const backend = new BrokenBackend();
  backend.mode = "fail";
  const incidents: SyncIncident[] = [];
  let now = 1000;
  const store = new LocalFirstStore(backend, { limit: 60, windowMs: 60_000 }, {
    syncMs: 10,
    syncTimeoutMs: 1000,
    autoSync: false,
    clock: () => now,
    onIncident: (incident) => incidents.push(incident),
  });
  for (let i = 0; i < 5; i++) store.hit("caller", now++);
  await store.sync();
  store.hit("caller", now++);
  await store.sync();
  assert.equal(store.synced, false);
  backend.mode = "answer";
  now += 500;
  await store.sync();
  assert.equal(store.synced, true);
  assert.equal(backend.received.length, 1);
  // The whole log: the store may have lost what it had acknowledged before the outage.
  assert.equal(backend.received[0]!.callers.get("caller")!.fresh.length, 6);
  assert.equal(incidents.length, 2);
  assert.equal(incidents[0]!.kind, "unsynced");
  // The outage began with the sync the first (new) caller's request started at once: as of that
  // request, at 1000.
  assert.deepEqual(incidents[1], { kind: "resynced", downMs: 506, failedSyncs: 2 });
  // Acknowledged hits are not sent again.
  await store.sync();
  assert.equal(backend.received[1]!.callers.get("caller")!.fresh.length, 0);
  // Nobody was refused because of the outage.
  assert.equal(atOnce(store.hit("caller", now)).remaining, 60 - 7);
});

Deno.test("local-first peek reports the local and the synced counts without counting", async () => {
  const backend: SyncBackend = {
    roundTrips: 0,
    sync: (batch) =>
      Promise.resolve(new Map([...batch.callers.keys()].map((k) => [k, [500, 600]]))),
    close: () => {},
  };
  const store = new LocalFirstStore(backend, { limit: 4, windowMs: 60_000 }, {
    syncMs: 10,
    syncTimeoutMs: 1000,
    autoSync: false,
    clock: () => 1000,
    // Synced by hand: new callers do not wait (their first answer is tested elsewhere).
    viewMaxAgeMs: Infinity,
  });
  atOnce(store.hit("caller", 1000));
  await store.sync();
  assert.deepEqual(store.peek("caller", 1000), { allowed: true, remaining: 1, resetSeconds: 60 });
  assert.deepEqual(store.hit("caller", 1001), { allowed: true, remaining: 0, resetSeconds: 60 });
  assert.equal(atOnce(store.peek("caller", 1001)).allowed, false);
  // The others' timestamps leave the window here as they would in the store.
  assert.deepEqual(atOnce(store.peek("caller", 60_601)).remaining, 2);
});

/**
 * A store whose backend answers every sync, synced by hand, at a clock standing at 1000; new callers
 * do not wait for the store (an unbounded view age), so that the batches are the test's own.
 */
function answeringStore(): { backend: BrokenBackend; store: LocalFirstStore } {
  const backend = new BrokenBackend();
  backend.mode = "answer";
  const store = new LocalFirstStore(backend, { limit: 60, windowMs: 60_000 }, {
    syncMs: 10,
    syncTimeoutMs: 1000,
    autoSync: false,
    clock: () => 1000,
    viewMaxAgeMs: Infinity,
  });
  return { backend, store };
}

Deno.test("local-first sends at most MAX_SYNC_CALLERS per sync and the callers left out go next", async () => {
  const { backend, store } = answeringStore();
  for (let i = 0; i <= MAX_SYNC_CALLERS; i++) store.hit(`c${i}`, 1000);
  await store.sync();
  await store.sync();
  const [first, second] = backend.received;
  assert.equal(first!.callers.size, MAX_SYNC_CALLERS);
  const left = `c${MAX_SYNC_CALLERS}`;
  assert.equal(first!.callers.has(left), false);
  assert.equal(second!.callers.has(left), true, "the caller left out goes first next time");
  assert.equal(second!.callers.get(left)!.fresh.length, 1);
});

Deno.test("local-first sends every caller with new hits but refreshes at most MAX_QUIET_CALLERS quiet ones per sync, in turn", async () => {
  const { backend, store } = answeringStore();
  const quiet = 2 * MAX_QUIET_CALLERS + 50;
  for (let i = 0; i < quiet; i++) store.hit(`q${i}`, 1000);
  await store.sync(); // every caller has a new hit: all are sent
  assert.equal(backend.received[0]!.callers.size, quiet);
  store.hit("busy", 1000);
  const refreshed = new Set<string>();
  for (let round = 0; round < 3; round++) {
    await store.sync();
    const batch = backend.received.at(-1)!;
    // In the first round "busy" has a new hit; later it is one more quiet caller taking its turn.
    assert.equal(batch.callers.size, MAX_QUIET_CALLERS + (round === 0 ? 1 : 0));
    if (round === 0) assert.ok(batch.callers.has("busy"), "a caller with a new hit is always sent");
    for (const key of batch.callers.keys()) if (key.startsWith("q")) refreshed.add(key);
  }
  assert.equal(refreshed.size, quiet, "the quiet callers take turns: none is left out");
});

Deno.test("local-first keeps at most MAX_WAITING_CALLERS callers waiting for the store; past it a new caller is decided at once", async () => {
  const backend = new BrokenBackend(); // hangs
  const store = new LocalFirstStore(backend, { limit: 60, windowMs: 60_000 }, {
    syncMs: 10,
    syncTimeoutMs: 50,
    waitMs: 60_000,
    autoSync: false,
  });
  const waiting = Array.from({ length: MAX_WAITING_CALLERS }, (_, i) => store.hit(`c${i}`, 1000));
  assert.ok(waiting.every((d) => d instanceof Promise));
  assert.equal(store.stats().waiting, MAX_WAITING_CALLERS);
  // One more new caller: decided from what the instance knows rather than queued without bound.
  assert.equal(atOnce(store.hit("one-more", 1000)).allowed, true);
  assert.equal(store.stats().unfetched, 1);
  assert.equal(store.stats().waiting, MAX_WAITING_CALLERS);
  // Closing decides every waiting request (the store never answered) and counts them.
  await store.close();
  assert.ok((await Promise.all(waiting)).every((d) => d.allowed));
  assert.equal(store.stats().waiting, 0);
  assert.equal(store.stats().unfetched, 1 + MAX_WAITING_CALLERS);
});

Deno.test("local-first looks at most SWEEP_PER_SYNC tracked callers per sync: idle ones are forgotten a bounded number at a time", async () => {
  let now = 1000;
  const backend = new BrokenBackend();
  backend.mode = "answer";
  const store = new LocalFirstStore(backend, { limit: 60, windowMs: 60_000 }, {
    syncMs: 10,
    syncTimeoutMs: 1000,
    autoSync: false,
    clock: () => now,
    viewMaxAgeMs: Infinity,
  });
  const callers = 3 * SWEEP_PER_SYNC;
  for (let i = 0; i < callers; i++) store.hit(`c${i}`, now);
  // The backlog: every caller with an unsent hit, sent MAX_SYNC_CALLERS at a time.
  assert.equal(store.backlog, callers);
  for (let i = 0; i < callers / MAX_SYNC_CALLERS; i++) await store.sync();
  assert.equal(store.backlog, 0);
  now += 60_001; // a window later every caller is idle
  const tracked = [store.stats().tracked];
  for (let i = 0; i < 3; i++) {
    await store.sync();
    tracked.push(store.stats().tracked);
  }
  assert.deepEqual(tracked, [callers, 2 * SWEEP_PER_SYNC, SWEEP_PER_SYNC, 0]);
});
