/**
 * The `local-first` consistency of a shared rate-limit store: the request path never waits for the
 * store.
 *
 * Each instance decides from its own exact log of the caller plus the other instances' counted
 * timestamps of that caller, as the last sync brought them. Its admitted requests go to the store in
 * batches: at most one sync in flight, started at most every `syncMs`, one round trip that writes
 * this instance's new hits and brings back the other instances' timestamps in the window for every
 * caller active here. The others' timestamps expire here as they would in the store, so the view
 * does not over-count between syncs.
 *
 * The bound: a hit of another instance reaches this one at most `D = 2·max(syncMs, rtt) + rtt`
 * after it is admitted (it waits for that instance's next sync to start, travels to the store, and
 * this instance's next sync starts and comes back). The last request a window admits at an instance
 * saw every other instance's hit except those of the last `D`, so in any window one caller is
 * admitted at most `limit + u`, where `u` is the number of its requests the other instances admitted
 * in a span of `D`: at most `⌈r'·D⌉` for a rate `r'` at the other instances, and never more than
 * `(N-1)·limit`, since each instance alone admits at most `limit`.
 * {@linkcode overshootBound} computes it; `tests/limit/local_first_test.ts` checks it against a
 * model with fast-check.
 *
 * When the store is down each instance keeps limiting by its own log (and the others' timestamps it
 * last saw, which expire on their own); the first sync that succeeds sends its whole log in the
 * window (member ids make that idempotent, and a store restarted empty gets it all back), so the
 * instances reconcile without any answer by a failure policy.
 *
 * @module
 */

import { decide, type Decision, type RateLimitPolicy, type RateLimitStore } from "./decision.ts";

/** How one caller's state of this instance is sent to the store. */
export interface SyncEntry {
  /**
   * This instance's counted timestamps in the window, ascending, for stores that replace it whole;
   * empty when `fresh` is (nothing to send).
   */
  log: readonly number[];
  /** Hits not yet acknowledged by the store: timestamp and a member id unique to this instance. */
  fresh: ReadonlyArray<readonly [time: number, member: string]>;
}

/** One round trip of the sync loop. */
export interface SyncBatch {
  /** The instance's clock when the batch was built. */
  now: number;
  /** The instance's id: the store tells its entries from the others' by it. */
  instance: string;
  /** Every caller active here, with what this instance has to send for it. */
  callers: ReadonlyMap<string, SyncEntry>;
}

/**
 * Where the counts meet: one round trip writes a batch and answers, per caller of the batch, the
 * other instances' counted timestamps in the window at `batch.now`.
 */
export interface SyncBackend {
  /** Writes `batch` and reads the others' timestamps back, per caller. */
  sync(batch: SyncBatch): Promise<Map<string, number[]>>;
  /** Round trips sent so far (a sync may take several on stores that cap a read). */
  readonly roundTrips: number;
  /** The most callers one sync may carry (default {@linkcode MAX_SYNC_CALLERS}). */
  readonly maxCallers?: number;
  /** Releases the connection. */
  close(): void | Promise<void>;
}

/** The two reports of a sync outage; limiting goes on by the local logs meanwhile. */
export type SyncIncident =
  | {
    /** A sync failed: this instance decides from its own log until one succeeds. */
    kind: "unsynced";
    /** The first error, as `Name: message`. */
    error: string;
  }
  | {
    /** A sync succeeded again; the hits admitted meanwhile reached the store. */
    kind: "resynced";
    /** How long syncs failed, in ms. */
    downMs: number;
    /** Syncs that failed. */
    failedSyncs: number;
  };

/** Options of {@linkcode LocalFirstStore}. */
export interface LocalFirstOptions {
  /** The shortest time between the starts of two syncs, in ms. */
  syncMs: number;
  /** The longest a sync may take before it counts as failed, in ms. */
  syncTimeoutMs: number;
  /** The most callers tracked at once; at the cap the caller added longest ago is forgotten. */
  maxCallers?: number;
  /** Clock of the decisions' bookkeeping and the sync loop (default `Date.now`). */
  clock?: () => number;
  /** Run the sync loop on a timer (default true; tests call {@linkcode LocalFirstStore.sync}). */
  autoSync?: boolean;
  /** Receives the start and the end of every sync outage. */
  onIncident?: (incident: SyncIncident) => void;
  /** This instance's id in the store (default: random). */
  instance?: string;
  /**
   * The longest a caller's view of the other instances may be old and still decide a request here
   * without asking the store first, in ms (default {@linkcode VIEW_MAX_AGE_MS}). A caller new to this
   * instance has no view: its first requests wait for one store round trip (see {@linkcode
   * LocalFirstStore}).
   */
  viewMaxAgeMs?: number;
  /**
   * The longest a request of a caller new to this instance waits for the store's answer, in ms
   * (default `syncTimeoutMs`); past it, or while the store is down, it is decided from what this
   * instance knows.
   */
  waitMs?: number;
}

/** Counters of a {@linkcode LocalFirstStore}. */
export interface LocalFirstStats {
  /** Decisions taken (hits and peeks). */
  decisions: number;
  /** Syncs that succeeded. */
  syncs: number;
  /** Of all syncs, those started at once for callers that wait (the others run every `syncMs`). */
  earlySyncs: number;
  /** Syncs that failed or timed out. */
  failedSyncs: number;
  /** Round trips the backend sent. */
  roundTrips: number;
  /** Callers tracked now. */
  tracked: number;
  /** Requests that waited for the store's answer about a caller new here (or with an old view). */
  waited: number;
  /** Of those, requests decided without it: the store was down, slow, or too many were waiting. */
  unfetched: number;
  /** Callers waiting for the store's answer now. */
  waiting: number;
}

interface Caller {
  /** This instance's counted timestamps, ascending. */
  log: number[];
  /** The sequence number of each timestamp of `log`, at the same index (its member id's tail). */
  members: number[];
  /** The other instances' counted timestamps as last synced, ascending. */
  others: number[];
  /** Hits not yet acknowledged by the store. */
  fresh: Array<[time: number, sequence: number]>;
  /** The newest request of this caller seen here (admitted or not, or a peek). */
  seen: number;
  /**
   * When the batch was built whose answer last brought the others' timestamps of this caller
   * (`-Infinity`: never, a caller new here).
   */
  viewAt: number;
  /** Requests waiting for the store's answer about this caller, in arrival order. */
  waiting: Waiter[] | undefined;
  /** Send the whole log with the next sync: the store may have lost it (an outage). */
  resend: boolean;
  /** The waiting requests had one answer showing the others' hits: they wait for a second. */
  confirming: boolean;
}

interface Waiter {
  now: number;
  /** Whether the request counts (`hit`) or only asks (`peek`). */
  count: boolean;
  resolve: (decision: Decision) => void;
}

const NOTHING: readonly number[] = Object.freeze([]);

/**
 * The most callers with nothing new that one sync refreshes (the others' counts only); the rest wait
 * their turn, least recently synced first.
 */
export const MAX_QUIET_CALLERS = 100;

/** The most callers one sync sends by default; the others go first in the next sync. */
export const MAX_SYNC_CALLERS = 1000;

/**
 * How old a caller's view of the other instances may be and still decide here without the store, by
 * default, in ms. A caller that keeps sending here has its view refreshed by every sync that carries
 * its hits; one that comes back after a pause (it was sent elsewhere meanwhile: a restart, a failover)
 * waits one round trip for a current view.
 */
export const VIEW_MAX_AGE_MS = 1000;

/**
 * The most callers that may wait for the store's answer at once; past it a new caller is decided from
 * what this instance knows (counted in `unfetched`), so that a spray of new callers against a slow
 * store cannot queue requests without bound.
 */
export const MAX_WAITING_CALLERS = 10_000;

/** Tracked callers one sync looks at to forget the idle and pick quiet ones to refresh. */
export const SWEEP_PER_SYNC = 1000;

/** What {@linkcode overshootBound} needs to know. */
export interface OvershootInput {
  /** The limit per window. */
  limit: number;
  /** The caller's requests per second, over every instance. */
  ratePerSecond: number;
  /** Instances the caller's requests are spread over, evenly (a round-robin load balancer). */
  instances: number;
  /** `RATE_LIMIT_SYNC_MS`. */
  syncMs: number;
  /** The store's round-trip time, in ms. */
  rttMs: number;
}

/**
 * The most requests of one caller a window can admit across instances in `local-first`, above the
 * limit: `min((N-1)·limit, ⌈r·(N-1)/N·D⌉)` with `D = 2·max(syncMs, rtt) + rtt`, the longest a hit
 * of one instance takes to reach the others. `r·(N-1)/N` is the caller's rate at the instances
 * other than the one deciding; with an uneven spread use `r` itself (pass `instances: Infinity`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * // 50 requests/s over two instances, syncs every 50 ms, a store 80 ms away: 25/s · 0.24 s = 6.
 * assert.equal(
 *   overshootBound({ limit: 60, ratePerSecond: 50, instances: 2, syncMs: 50, rttMs: 80 }),
 *   6,
 * );
 * ```
 */
export function overshootBound(input: OvershootInput): number {
  const { limit, ratePerSecond, instances, syncMs, rttMs } = input;
  if (instances <= 1) return 0;
  const staleMs = 2 * Math.max(syncMs, rttMs) + rttMs;
  const share = Number.isFinite(instances) ? (instances - 1) / instances : 1;
  const unseen = Math.ceil((ratePerSecond * share * staleMs) / 1000 - 1e-9);
  return Number.isFinite(instances) ? Math.min((instances - 1) * limit, unseen) : unseen;
}

/**
 * A store that decides locally and syncs with a shared backend in the background.
 *
 * A caller new to this instance (or back after its view of the others grew older than
 * `viewMaxAgeMs`: it was sent elsewhere meanwhile) is decided only once the store has answered for
 * it: its first request waits for one round trip, which the sync starts at once, and its requests
 * arriving meanwhile wait for the same answer and are then decided in arrival order. So a process that
 * replaces another (a restart, a one-port handover) or takes over its callers (a failover) starts
 * from what the store holds rather than from an empty log. Every later request is answered at once.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import type { SyncBatch } from "./local_first.ts";
 * // A shared store where the other instances have counted 58 hits of every caller.
 * const others = Array.from({ length: 58 }, (_, i) => i);
 * const backend = {
 *   roundTrips: 0,
 *   sync(batch: SyncBatch) {
 *     backend.roundTrips++;
 *     return Promise.resolve(new Map([...batch.callers.keys()].map((key) => [key, others])));
 *   },
 *   close() {},
 * };
 * const store = new LocalFirstStore(backend, { limit: 60, windowMs: 60_000 }, {
 *   syncMs: 50,
 *   syncTimeoutMs: 1000,
 *   autoSync: false,
 *   clock: () => 100,
 * });
 * // A caller new here waits for the store's answer; it holds the others' hits (the caller was
 * // served elsewhere), so a second answer is read a sync period later: two round trips, once.
 * assert.equal((await store.hit("192.0.2.1", 100)).remaining, 1);
 * assert.equal(backend.roundTrips, 2);
 * // The next ones are answered at once from the local log and the others' 58.
 * assert.equal((store.hit("192.0.2.1", 100) as { allowed: boolean }).allowed, true);
 * assert.equal((store.hit("192.0.2.1", 100) as { allowed: boolean }).allowed, false);
 * assert.equal(backend.roundTrips, 2);
 * await store.close();
 * ```
 */
export class LocalFirstStore implements RateLimitStore {
  readonly #backend: SyncBackend;
  readonly #policy: RateLimitPolicy;
  readonly #options: LocalFirstOptions;
  readonly #clock: () => number;
  readonly #instance: string;
  readonly #max: number;
  readonly #viewMaxAgeMs: number;
  readonly #waitMs: number;
  /** Every caller tracked here, the next to sweep first. */
  readonly #callers = new Map<string, Caller>();
  /** Callers with hits the store has not acknowledged (the backlog), the longest waiting first. */
  readonly #dirty = new Map<string, Caller>();
  /** Callers whose requests wait for the store's answer, not yet carried by a sync. */
  readonly #wanted = new Map<string, Caller>();
  /** Callers waiting a sync period before their second answer (see `#confirm`). */
  readonly #confirming = new Map<string, Caller>();
  #waitingCallers = 0;
  #sequence = 0;
  #inFlight: Promise<void> | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  #closing: Promise<void> | undefined;
  #down: { since: number; failed: number } | undefined;
  /** A wait ran out before the store answered: nobody waits again until a sync succeeds. */
  #slow = false;
  #stats = { decisions: 0, syncs: 0, earlySyncs: 0, failedSyncs: 0, waited: 0, unfetched: 0 };

  /** Creates the store over `backend` and starts the sync loop. */
  constructor(backend: SyncBackend, policy: RateLimitPolicy, options: LocalFirstOptions) {
    this.#backend = backend;
    this.#policy = policy;
    this.#options = options;
    this.#clock = options.clock ?? Date.now;
    this.#instance = options.instance ?? crypto.randomUUID().slice(0, 8);
    this.#max = options.maxCallers ?? 500_000;
    this.#viewMaxAgeMs = options.viewMaxAgeMs ?? VIEW_MAX_AGE_MS;
    this.#waitMs = options.waitMs ?? options.syncTimeoutMs;
    if (options.autoSync ?? true) this.#schedule(options.syncMs);
  }

  /**
   * {@inheritDoc RateLimitStore.hit}
   *
   * Answers at once for a caller this instance knows; a caller new here waits for the store's answer.
   */
  hit(key: string, now: number): Decision | Promise<Decision> {
    this.#stats.decisions++;
    const caller = this.#caller(key, now);
    const current = this.#current(caller, now);
    if (now > caller.seen) caller.seen = now;
    if (caller.waiting !== undefined || !current) return this.#wait(key, caller, now, true);
    return this.#count(key, caller, now);
  }

  /** {@inheritDoc RateLimitStore.peek} */
  peek(key: string, now: number): Decision | Promise<Decision> {
    this.#stats.decisions++;
    const known = this.#callers.get(key);
    if (known !== undefined && known.waiting === undefined && this.#current(known, now)) {
      return this.#peekOf(known, now);
    }
    const caller = known ?? this.#caller(key, now);
    if (now > caller.seen) caller.seen = now;
    return this.#wait(key, caller, now, false);
  }

  /**
   * Sends one batch now (unless one is in flight: then waits for it) and applies the reply. Called
   * by the loop every `syncMs`, and at once while callers new here wait; exposed for tests.
   */
  sync(): Promise<void> {
    return this.#start(false);
  }

  /** Starts a sync unless one is in flight; `early`: started at once for callers that wait. */
  #start(early: boolean): Promise<void> {
    this.#inFlight ??= (async () => {
      let settle: () => void;
      try {
        settle = await this.#syncOnce(early);
      } finally {
        this.#inFlight = undefined;
      }
      // The waiting requests are decided once the sync is over: a `sync()` they lead to is a new one.
      settle();
      // Callers that arrived during that sync wait for the next: it starts now.
      if (this.#wanted.size > 0 && !this.#closed) void this.#start(true);
    })();
    return this.#inFlight;
  }

  /** The counters since the store was created. */
  stats(): LocalFirstStats {
    return {
      ...this.#stats,
      roundTrips: this.#backend.roundTrips,
      tracked: this.#callers.size,
      waiting: this.#waitingCallers,
    };
  }

  /** Callers with hits the store has not acknowledged yet. */
  get backlog(): number {
    return this.#dirty.size;
  }

  /** Whether the last sync succeeded. */
  get synced(): boolean {
    return this.#down === undefined;
  }

  /**
   * Stops the loop and flushes: waits for the sync in flight, then syncs until every admitted hit
   * has reached the store (or a sync fails, or `syncTimeoutMs` has passed), then closes the backend.
   * A stopping instance (SIGTERM) calls it, so the process that replaces it finds its hits there.
   */
  close(): Promise<void> {
    // A second call (a test's clean-up after a stop) waits for the first.
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    const deadline = this.#clock() + this.#options.syncTimeoutMs;
    // The first round may only have waited for the sync in flight: go on while hits are left.
    for (let round = 0; round < 1000; round++) {
      await this.sync().catch(() => {});
      if (this.#dirty.size === 0 || !this.synced || this.#clock() > deadline) break;
    }
    for (const [key, caller] of [...this.#wanted, ...this.#confirming]) {
      this.#release(key, caller, false);
    }
    await this.#backend.close();
  }

  /**
   * Whether this instance may decide `caller`'s request at `now` without the store: the store has
   * answered for it, and it has kept sending here (its previous request here is at most
   * `viewMaxAgeMs` old) or that answer is that recent. A caller back after a longer pause here may
   * have been served elsewhere meanwhile (a failover, a restart of this instance's peer).
   */
  #current(caller: Caller, now: number): boolean {
    // While the store is down nobody waits for it: each instance limits by what it knows.
    if (this.#down !== undefined || this.#slow || this.#viewMaxAgeMs === Infinity) return true;
    if (caller.viewAt === Number.NEGATIVE_INFINITY) return false;
    const maxAge = this.#viewMaxAgeMs;
    return now - caller.viewAt <= maxAge || now - caller.seen <= maxAge;
  }

  /** Queues a request of `caller` until the store has answered for it. */
  #wait(key: string, caller: Caller, now: number, count: boolean): Decision | Promise<Decision> {
    if (caller.waiting === undefined) {
      if (this.#waitingCallers >= MAX_WAITING_CALLERS || this.#closed) {
        this.#stats.unfetched++;
        return count ? this.#count(key, caller, now) : this.#peekOf(caller, now);
      }
      caller.waiting = [];
      this.#waitingCallers++;
      this.#wanted.set(key, caller);
    }
    this.#stats.waited++;
    const waiting = caller.waiting;
    const decision = new Promise<Decision>((resolve) => waiting.push({ now, count, resolve }));
    void this.#start(true);
    return decision;
  }

  /** Decides the requests of `caller` that waited: with the store's answer, or without it. */
  #release(key: string, caller: Caller, fetched: boolean): void {
    const waiting = caller.waiting;
    if (waiting === undefined) return;
    caller.waiting = undefined;
    caller.confirming = false;
    this.#waitingCallers--;
    this.#wanted.delete(key);
    this.#confirming.delete(key);
    if (!fetched) this.#stats.unfetched += waiting.length;
    for (const request of waiting) {
      request.resolve(
        request.count ? this.#count(key, caller, request.now) : this.#peekOf(caller, request.now),
      );
    }
  }

  /** Decides a request of `caller` from what this instance knows and counts it if admitted. */
  #count(key: string, caller: Caller, now: number): Decision {
    const decision = this.#decision(caller, now);
    if (decision.allowed) {
      // The member id is built when the hit is sent: a number here costs no string per request.
      const sequence = this.#sequence++;
      insertInOrder(caller, now, sequence);
      caller.fresh.push([now, sequence]);
      if (!this.#dirty.has(key)) this.#dirty.set(key, caller);
    }
    return decision;
  }

  #peekOf(caller: Caller, now: number): Decision {
    expire(caller, now - this.#policy.windowMs);
    const count = caller.log.length + caller.others.length;
    if (count === 0) return { allowed: true, remaining: this.#policy.limit, resetSeconds: 0 };
    const decision = decide(count, oldestOf(caller), now, this.#policy);
    // `decide` answers for one more request; a peek counts nothing.
    return {
      ...decision,
      allowed: count < this.#policy.limit,
      remaining: Math.max(0, this.#policy.limit - count),
    };
  }

  #decision(caller: Caller, now: number): Decision {
    expire(caller, now - this.#policy.windowMs);
    return decide(caller.log.length + caller.others.length, oldestOf(caller), now, this.#policy);
  }

  #caller(key: string, now: number): Caller {
    let caller = this.#callers.get(key);
    if (caller === undefined) {
      if (this.#callers.size >= this.#max) this.#evict();
      // Forgotten at the cap with hits still unsent: it comes back with them.
      caller = this.#dirty.get(key) ?? {
        log: [],
        members: [],
        others: [],
        fresh: [],
        seen: now,
        viewAt: Number.NEGATIVE_INFINITY,
        waiting: undefined,
        resend: false,
        confirming: false,
      };
      this.#callers.set(key, caller);
    }
    return caller;
  }

  /**
   * Bounded memory matters more than one caller's count: forgets the caller swept longest ago. Its
   * unsent hits stay in the backlog until the store has them; a caller with requests waiting is
   * passed over.
   */
  #evict(): void {
    for (const [key, caller] of this.#callers) {
      this.#callers.delete(key);
      if (caller.waiting === undefined) return;
      this.#callers.set(key, caller);
    }
  }

  #schedule(delayMs: number): void {
    if (this.#closed) return;
    this.#timer = setTimeout(() => {
      const started = this.#clock();
      this.sync().finally(() => {
        // At most one sync in flight, and starts at least `syncMs` apart.
        this.#schedule(Math.max(0, this.#options.syncMs - (this.#clock() - started)));
      });
    }, delayMs);
    // The loop must never keep a process (or a test) alive.
    Deno.unrefTimer(this.#timer);
  }

  /** One round trip; resolves to what decides the requests that waited for it. */
  async #syncOnce(early: boolean): Promise<() => void> {
    const now = this.#clock();
    const { batch, carried } = this.#batch(now, early);
    const releaseAll = (fetched: boolean) => () => {
      for (const [key, caller] of carried) this.#release(key, caller, fetched);
    };
    if (batch.callers.size === 0) return releaseAll(false);
    if (early) this.#stats.earlySyncs++;
    // What each caller's queue held: acknowledged by a success, whatever the batch carried.
    const sent = carried.map(([, caller]) => caller.fresh.length);
    // Requests waiting for this answer are decided without it once `waitMs` has passed.
    let timer: ReturnType<typeof setTimeout> | undefined;
    if (carried.some(([, caller]) => caller.waiting !== undefined)) {
      timer = setTimeout(() => {
        this.#slow = true;
        for (const [key, caller] of carried) this.#release(key, caller, false);
      }, this.#waitMs);
    }
    let reply: Map<string, number[]>;
    try {
      reply = await bounded(this.#backend.sync(batch), this.#options.syncTimeoutMs);
    } catch (error) {
      clearTimeout(timer);
      this.#failed(now, error);
      return releaseAll(false);
    }
    clearTimeout(timer);
    carried.forEach(([key, caller], i) => {
      // Hits admitted while the sync was in flight stay for the next one.
      caller.fresh.splice(0, sent[i]!);
      caller.resend = false;
      if (caller.fresh.length === 0 && this.#dirty.get(key) === caller) this.#dirty.delete(key);
      // A caller the reply leaves out has no hits of the others in the store.
      caller.others = reply.get(key)?.toSorted((a, b) => a - b) ?? [];
      caller.viewAt = now;
    });
    this.#succeeded(now);
    const elapsed = Math.max(0, this.#clock() - now);
    return () => {
      for (const [key, caller] of carried) {
        if (caller.waiting !== undefined && !caller.confirming && caller.others.length > 0) {
          this.#confirm(key, caller, Math.max(this.#options.syncMs, elapsed) + elapsed);
        } else {
          this.#release(key, caller, true);
        }
      }
    };
  }

  /**
   * The store holds the others' hits of a caller new here: it was served elsewhere in this window
   * (an instance restarted, stopped, or failed over), and that instance may still hold hits it has
   * not sent. Its requests wait for a second answer, read once that instance's next sync has had
   * time to land (`delayMs`: a sync period and a round trip), so that a caller moving between
   * instances is not admitted the hits in flight again. Callers the store knows nothing of (the
   * usual new caller) are decided on the first answer.
   */
  #confirm(key: string, caller: Caller, delayMs: number): void {
    caller.confirming = true;
    this.#confirming.set(key, caller);
    setTimeout(() => {
      if (this.#confirming.get(key) !== caller) return;
      this.#confirming.delete(key);
      this.#wanted.set(key, caller);
      void this.#start(true);
    }, delayMs);
  }

  /**
   * The batch of one sync, at most the backend's `maxCallers`: first the callers whose requests wait
   * for it, then the backlog (callers with unsent hits, the longest waiting first), then, with what
   * room is left, a few quiet callers whose view is refreshed. A sweep over a bounded number of
   * tracked callers per sync forgets those idle for a window, so a sync's work follows the request
   * rate rather than the number of callers tracked.
   */
  #batch(now: number, early: boolean): { batch: SyncBatch; carried: Array<[string, Caller]> } {
    const cutoff = now - this.#policy.windowMs;
    const limit = this.#backend.maxCallers ?? MAX_SYNC_CALLERS;
    const callers = new Map<string, SyncEntry>();
    const carried: Array<[string, Caller]> = [];
    const take = (key: string, caller: Caller) => {
      callers.set(key, this.#entry(caller, cutoff));
      carried.push([key, caller]);
    };
    for (const [key, caller] of this.#wanted) {
      if (callers.size >= limit) break;
      this.#wanted.delete(key);
      take(key, caller);
    }
    const backlog: Array<[string, Caller]> = [];
    for (const [key, caller] of this.#dirty) {
      if (callers.size >= limit) break;
      if (callers.has(key)) continue;
      take(key, caller);
      backlog.push([key, caller]);
    }
    // Those carried go to the back of the backlog, so that the next sync takes the others first.
    for (const [key, caller] of backlog) {
      this.#dirty.delete(key);
      this.#dirty.set(key, caller);
    }
    // The syncs started at once for callers that wait carry them and the backlog, not the sweep.
    if (early) return { batch: { now, instance: this.#instance, callers }, carried };
    let room = Math.min(limit - callers.size, MAX_QUIET_CALLERS);
    const kept: Array<[string, Caller]> = [];
    const refreshed: Array<[string, Caller]> = [];
    let swept = 0;
    for (const [key, caller] of this.#callers) {
      if (swept++ >= SWEEP_PER_SYNC) break;
      this.#callers.delete(key);
      // Idle for a window with nothing to send: forgotten (its hits no longer matter to anyone).
      if (caller.waiting === undefined && caller.seen <= cutoff && !this.#dirty.has(key)) continue;
      if (room > 0 && !callers.has(key) && caller.waiting === undefined && caller.seen > cutoff) {
        room--;
        take(key, caller);
        refreshed.push([key, caller]);
      } else {
        kept.push([key, caller]);
      }
    }
    // The swept go to the back, those refreshed now last: the next sweep starts with the others.
    for (const [key, caller] of kept) this.#callers.set(key, caller);
    for (const [key, caller] of refreshed) this.#callers.set(key, caller);
    return { batch: { now, instance: this.#instance, callers }, carried };
  }

  #entry(caller: Caller, cutoff: number): SyncEntry {
    // Hits older than the window no longer matter to anyone.
    while (caller.fresh.length > 0 && caller.fresh[0]![0] <= cutoff) caller.fresh.shift();
    expire(caller, cutoff);
    // After an outage the store may have lost what it had (a Redis restarted empty): the log is
    // sent whole, and member ids make that idempotent where nothing was lost.
    const fresh = caller.resend
      ? caller.log.map((t, i) => this.#member(t, caller.members[i]!))
      : caller.fresh.map(([t, sequence]) => this.#member(t, sequence));
    // Only a caller with something to send needs its log copied (stores that replace it whole).
    return { log: fresh.length > 0 ? caller.log.slice() : NOTHING, fresh };
  }

  /** The member id of a hit in the store: unique per instance and request, the same on a resend. */
  #member(t: number, sequence: number): [number, string] {
    return [t, `${t}:${this.#instance}:${sequence.toString(36)}`];
  }

  #failed(now: number, error: unknown): void {
    this.#stats.failedSyncs++;
    if (this.#down !== undefined) {
      this.#down.failed++;
      return;
    }
    this.#down = { since: now, failed: 1 };
    // Once per outage: every log in the window goes again with the first syncs that succeed.
    for (const [key, caller] of this.#callers) {
      if (caller.log.length === 0) continue;
      caller.resend = true;
      if (!this.#dirty.has(key)) this.#dirty.set(key, caller);
    }
    this.#options.onIncident?.({
      kind: "unsynced",
      error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
    });
  }

  #succeeded(now: number): void {
    this.#stats.syncs++;
    this.#slow = false;
    const down = this.#down;
    if (down === undefined) return;
    this.#down = undefined;
    this.#options.onIncident?.({
      kind: "resynced",
      downMs: now - down.since,
      failedSyncs: down.failed,
    });
  }
}

/** Raised when a sync outlives its bound. */
export class SyncTimeoutError extends Error {
  /** Creates the error for a bound of `timeoutMs`. */
  constructor(timeoutMs: number) {
    super(`rate-limit sync did not answer within ${timeoutMs} ms`);
    this.name = "SyncTimeoutError";
  }
}

function bounded<T>(result: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new SyncTimeoutError(timeoutMs)), timeoutMs);
  });
  return Promise.race([result, timeout]).finally(() => clearTimeout(timer));
}

function expire(caller: Caller, cutoff: number): void {
  const mine = expiredIn(caller.log, cutoff);
  if (mine > 0) {
    caller.log = caller.log.slice(mine);
    caller.members = caller.members.slice(mine);
  }
  const theirs = expiredIn(caller.others, cutoff);
  if (theirs > 0) caller.others = caller.others.slice(theirs);
}

/** How many timestamps at the start of the ascending `log` are at or before `cutoff`. */
function expiredIn(log: number[], cutoff: number): number {
  let expired = 0;
  while (expired < log.length && log[expired]! <= cutoff) expired++;
  return expired;
}

function oldestOf(caller: Caller): number | undefined {
  const mine = caller.log[0];
  const theirs = caller.others[0];
  if (mine === undefined) return theirs;
  return theirs === undefined ? mine : Math.min(mine, theirs);
}

/** Inserts `t` and its sequence in order: a clock that stepped back makes `t` not the newest. */
function insertInOrder(caller: Caller, t: number, sequence: number): void {
  let i = caller.log.length;
  if (i === 0 || caller.log[i - 1]! <= t) {
    caller.log.push(t);
    caller.members.push(sequence);
    return;
  }
  while (i > 0 && caller.log[i - 1]! > t) i--;
  caller.log.splice(i, 0, t);
  caller.members.splice(i, 0, sequence);
}
