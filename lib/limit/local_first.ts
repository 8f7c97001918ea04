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
}

/** Counters of a {@linkcode LocalFirstStore}. */
export interface LocalFirstStats {
  /** Decisions taken (hits and peeks). */
  decisions: number;
  /** Syncs that succeeded. */
  syncs: number;
  /** Syncs that failed or timed out. */
  failedSyncs: number;
  /** Round trips the backend sent. */
  roundTrips: number;
  /** Callers tracked now. */
  tracked: number;
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
  /** The newest request of this caller seen here (admitted or not). */
  seen: number;
}

const NOTHING: readonly number[] = Object.freeze([]);

/**
 * The most callers with nothing new that one sync refreshes (the others' counts only); the rest wait
 * their turn, least recently synced first.
 */
export const MAX_QUIET_CALLERS = 100;

/** The most callers one sync sends by default; the others go first in the next sync. */
export const MAX_SYNC_CALLERS = 1000;

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
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import type { SyncBatch } from "./local_first.ts";
 * // A shared store where the other instances have counted 59 hits of every caller.
 * const others = Array.from({ length: 59 }, (_, i) => i);
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
 * // Answered at once from the local log: no round trip on the request path.
 * assert.equal(store.hit("192.0.2.1", 100).allowed, true);
 * assert.equal(backend.roundTrips, 0);
 * // One sync sends the hit and brings back the others' 59: the 61st request is refused.
 * await store.sync();
 * assert.equal(backend.roundTrips, 1);
 * assert.equal(store.hit("192.0.2.1", 100).allowed, false);
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
  readonly #callers = new Map<string, Caller>();
  #sequence = 0;
  #inFlight: Promise<void> | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  #down: { since: number; failed: number } | undefined;
  #stats = { decisions: 0, syncs: 0, failedSyncs: 0 };

  /** Creates the store over `backend` and starts the sync loop. */
  constructor(backend: SyncBackend, policy: RateLimitPolicy, options: LocalFirstOptions) {
    this.#backend = backend;
    this.#policy = policy;
    this.#options = options;
    this.#clock = options.clock ?? Date.now;
    this.#instance = options.instance ?? crypto.randomUUID().slice(0, 8);
    this.#max = options.maxCallers ?? 500_000;
    if (options.autoSync ?? true) this.#schedule(options.syncMs);
  }

  /** {@inheritDoc RateLimitStore.hit} */
  hit(key: string, now: number): Decision {
    this.#stats.decisions++;
    const caller = this.#caller(key, now);
    const decision = this.#decision(caller, now);
    if (decision.allowed) {
      // The member id is built when the hit is sent: a number here costs no string per request.
      const sequence = this.#sequence++;
      insertInOrder(caller, now, sequence);
      caller.fresh.push([now, sequence]);
    }
    return decision;
  }

  /** {@inheritDoc RateLimitStore.peek} */
  peek(key: string, now: number): Decision {
    this.#stats.decisions++;
    const caller = this.#callers.get(key);
    if (caller === undefined) {
      return { allowed: true, remaining: this.#policy.limit, resetSeconds: 0 };
    }
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

  /**
   * Sends one batch now (unless one is in flight: then waits for it) and applies the reply. Called
   * by the loop every `syncMs`; exposed for tests and for a drain at shutdown.
   */
  sync(): Promise<void> {
    this.#inFlight ??= this.#syncOnce().finally(() => {
      this.#inFlight = undefined;
    });
    return this.#inFlight;
  }

  /** The counters since the store was created. */
  stats(): LocalFirstStats {
    return {
      ...this.#stats,
      roundTrips: this.#backend.roundTrips,
      tracked: this.#callers.size,
    };
  }

  /** Whether the last sync succeeded. */
  get synced(): boolean {
    return this.#down === undefined;
  }

  /** Stops the loop, sends what is left once, and closes the backend. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.sync().catch(() => {});
    await this.#backend.close();
  }

  #decision(caller: Caller, now: number): Decision {
    expire(caller, now - this.#policy.windowMs);
    return decide(caller.log.length + caller.others.length, oldestOf(caller), now, this.#policy);
  }

  #caller(key: string, now: number): Caller {
    let caller = this.#callers.get(key);
    if (caller === undefined) {
      if (this.#callers.size >= this.#max) {
        // Bounded memory matters more than one caller's count: forget the one added longest ago.
        const oldest = this.#callers.keys().next();
        if (!oldest.done) this.#callers.delete(oldest.value);
      }
      caller = { log: [], members: [], others: [], fresh: [], seen: now };
      this.#callers.set(key, caller);
    }
    if (now > caller.seen) caller.seen = now;
    return caller;
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

  async #syncOnce(): Promise<void> {
    const now = this.#clock();
    const batch = this.#batch(now);
    if (batch.callers.size === 0) return;
    // What each caller's queue held: acknowledged by a success, whatever the batch carried.
    const sent = new Map<string, number>();
    for (const key of batch.callers.keys()) sent.set(key, this.#callers.get(key)!.fresh.length);
    let reply: Map<string, number[]>;
    try {
      reply = await bounded(this.#backend.sync(batch), this.#options.syncTimeoutMs);
    } catch (error) {
      this.#failed(now, error);
      return;
    }
    for (const [key, count] of sent) {
      const caller = this.#callers.get(key);
      if (caller === undefined) continue;
      // Hits admitted while the sync was in flight stay for the next one.
      caller.fresh.splice(0, count);
      const others = reply.get(key);
      if (others !== undefined) caller.others = others.toSorted((a, b) => a - b);
    }
    this.#succeeded(now);
  }

  /** The callers active here (a request in the window, or hits to send); forgets the rest. */
  #batch(now: number): SyncBatch {
    const cutoff = now - this.#policy.windowMs;
    const callers = new Map<string, SyncEntry>();
    const limit = this.#backend.maxCallers ?? MAX_SYNC_CALLERS;
    const quiet: string[] = [];
    const idle: string[] = [];
    let left = false;
    for (const [key, caller] of this.#callers) {
      // Hits older than the window no longer matter to anyone.
      while (caller.fresh.length > 0 && caller.fresh[0]![0] <= cutoff) caller.fresh.shift();
      if (caller.seen <= cutoff && caller.fresh.length === 0) {
        idle.push(key);
        continue;
      }
      expire(caller, cutoff);
      // After an outage the store may have lost what it had (a Redis restarted empty): every log
      // is sent whole, and member ids make that idempotent where nothing was lost.
      const news = this.#down === undefined ? caller.fresh.length > 0 : caller.log.length > 0;
      if (!news) quiet.push(key);
      else if (callers.size < limit) callers.set(key, this.#entry(caller));
      else left = true;
    }
    for (const key of idle) this.#callers.delete(key);
    // Callers with nothing new are refreshed with what room is left, a bounded number per sync, so
    // a sync's work follows the request rate rather than the number of callers tracked.
    const room = Math.min(limit - callers.size, MAX_QUIET_CALLERS);
    for (const key of quiet.slice(0, Math.max(0, room))) {
      callers.set(key, this.#entry(this.#callers.get(key)!));
    }
    if (left || quiet.length > room) {
      // Some callers waited: the ones sent now go to the back, so the next sync takes the others.
      for (const key of callers.keys()) {
        const caller = this.#callers.get(key)!;
        this.#callers.delete(key);
        this.#callers.set(key, caller);
      }
    }
    return { now, instance: this.#instance, callers };
  }

  #entry(caller: Caller): SyncEntry {
    const fresh = this.#down === undefined
      ? caller.fresh.map(([t, sequence]) => this.#member(t, sequence))
      : caller.log.map((t, i) => this.#member(t, caller.members[i]!));
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
    this.#options.onIncident?.({
      kind: "unsynced",
      error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
    });
  }

  #succeeded(now: number): void {
    this.#stats.syncs++;
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
