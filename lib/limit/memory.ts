/**
 * The in-memory rate-limit store: one process, exact, bounded (the default store).
 *
 * @module
 */

import {
  decide,
  type Decision,
  peekDecision,
  type RateLimitPolicy,
  type RateLimitStore,
} from "./decision.ts";
import { ipv4Value } from "./caller.ts";
import {
  add,
  countOf,
  keepNewest,
  liveAfter,
  newestOf,
  oldestOf,
  type RunLog,
  shiftTimes,
  trim,
  twoRequests,
} from "./run_log.ts";
import { later } from "../timer.ts";

/** Options of {@linkcode MemoryStore}. */
export interface MemoryStoreOptions {
  /** The most callers tracked at once; at the cap the least recently added caller is forgotten. */
  maxCallers?: number;
  /** Clock for the background sweep; defaults to `Date.now`. */
  now?: () => number;
  /** Run the background sweep every {@linkcode SWEEP_INTERVAL_MS} (default true; tests sweep by hand). */
  sweep?: boolean;
  /** Called once when the cap is first reached, and again only after the store has gone below it. */
  onCapacity?: (tracked: number) => void;
}

/** Counters of a {@linkcode MemoryStore}, for tests and operators. */
export interface MemoryStoreStats {
  /** Callers tracked now. */
  tracked: number;
  /** Callers forgotten because the cap was reached. */
  evicted: number;
  /** Of the tracked callers, those still held under the previous base time (moving across). */
  previousBase: number;
}

/**
 * The key a caller is held under in the in-memory store: a canonical dotted IPv4 address (no leading
 * zeros, as `keyOfIp` in `caller.ts` writes it) as its 32-bit value ({@linkcode ipv4Value}), which V8
 * keeps as a small integer (no string to hash, compare or keep alive); any other key as it is.
 * Distinct strings get distinct keys: only canonical addresses become numbers, and a number never
 * equals a string in a `Map`.
 */
export function compactKey(key: string): number | string {
  const value = ipv4Value(key);
  return value === undefined ? key : value;
}

/**
 * How far `now` may drift from the store's base time before the base moves: integer offsets stay
 * within V8's small integers (31 bits and a sign in Deno, which does not compress pointers).
 */
export const REBASE_AFTER_MS = 2 ** 30;

/**
 * How often the background sweep runs. Often and short rather than once a second and long: with a
 * one-second window every caller must be visited every half second, and 500,000 callers visited in
 * one pass held the event loop for tens of milliseconds.
 */
export const SWEEP_INTERVAL_MS = 100;
/**
 * How long after the store is created the sweep starts. Nothing can leave a window before then (a
 * window is at least a second), and a cold start's first responses are sent first: the interval's
 * `setInterval` loads Node's timers on first use (README, "Cold start").
 */
export const FIRST_SWEEP_DELAY_MS = 1000;
/** Each caller is visited about this many times per window, so that none outlives it by much. */
const VISITS_PER_WINDOW = 2;
/** The fewest callers one sweep pass visits. */
const MIN_SWEEP_BUDGET = 100;
/** The default cap on tracked callers (`RATE_LIMIT_MAX_CALLERS`). */
const DEFAULT_MAX_CALLERS = 500_000;

/** A caller's counted requests: one timestamp, or runs of them ({@linkcode RunLog}). */
type Entry = number | RunLog;
type Key = number | string;

/** The newest timestamp of an entry (`undefined` for an empty log). */
function newestOfEntry(entry: Entry): number | undefined {
  return typeof entry === "number" ? entry : newestOf(entry);
}

/**
 * The in-memory store: one process, exact, bounded.
 *
 * Each caller holds its counted timestamps: a bare number for one request (the common case) or a
 * {@linkcode RunLog} (one timestamp per distinct time, a count only beside a repeated one), kept
 * ascending (a request from a clock that stepped back is inserted in order), whose length is bounded
 * by the distinct times in the window, not by the limit. With hundreds of thousands of callers, hashing key strings and the garbage collector's
 * work on them dominated the cost of a decision, so two representation choices keep a caller with
 * one request free of any heap object of its own: IPv4 callers are held under their address as an
 * integer ({@linkcode compactKey}), and timestamps are kept as milliseconds since a base time,
 * small integers that V8 stores unboxed in the map. The base moves forward every 2^30 ms (about 12
 * days) without a pause: the callers held under the previous base stay in a second map and move
 * across (their times shifted) when they are next seen or when the sweep reaches them. A sweep every
 * {@linkcode SWEEP_INTERVAL_MS} walks part of the map so that the whole map is visited about twice
 * per window, and forgets callers with nothing left in the window.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const store = new MemoryStore({ limit: 60, windowMs: 60_000 });
 * assert.deepEqual(store.hit("192.0.2.1", Date.now()), { allowed: true, remaining: 59, resetSeconds: 60 });
 * store.close();
 * ```
 */
export class MemoryStore implements RateLimitStore {
  readonly #policy: RateLimitPolicy;
  readonly #max: number;
  readonly #now: () => number;
  readonly #onCapacity: ((tracked: number) => void) | undefined;
  /** Caller -> counted timestamps, as offsets from `#base`. */
  #log = new Map<Key, Entry>();
  /** Callers still held as offsets from the previous base; `undefined` once all have moved. */
  #old: Map<Key, Entry> | undefined;
  /** The previous base's offsets minus this are offsets from `#base`. */
  #shift = 0;
  /** The time offsets count from: set by the first call, moved forward by `#moveBase`. */
  #base = Number.NaN;
  #cursor: MapIterator<[Key, Entry]> | undefined;
  #oldCursor: MapIterator<[Key, Entry]> | undefined;
  #evictCursor: MapIterator<Key> | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  /** Cancels the wait before the first sweep (see the constructor). */
  #cancelStart: (() => void) | undefined;
  #evicted = 0;
  #atCapacity = false;

  /** Creates a store for `policy`. */
  constructor(policy: RateLimitPolicy, options: MemoryStoreOptions = {}) {
    this.#policy = policy;
    this.#max = options.maxCallers ?? DEFAULT_MAX_CALLERS;
    this.#now = options.now ?? Date.now;
    this.#onCapacity = options.onCapacity;
    // The wait before the interval uses a timer that loads nothing; it keeps the process alive
    // until then (or until close()), the interval itself never does.
    if (options.sweep ?? true) {
      this.#cancelStart = later(FIRST_SWEEP_DELAY_MS, () => this.#startSweep());
    }
  }

  #startSweep(): void {
    this.#cancelStart = undefined;
    const timer = setInterval(() => this.sweep(this.#now()), SWEEP_INTERVAL_MS);
    // The sweep must never keep a process (or a test) alive.
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  /** {@inheritDoc RateLimitStore.hit} */
  hit(key: string, now: number): Decision {
    const policy = this.#policy;
    const t = this.#offset(now);
    const cutoff = t - policy.windowMs;
    const id = compactKey(key);
    let entry = this.#log.get(id);
    if (entry === undefined && this.#old !== undefined) entry = this.#adopt(id);
    if (entry === undefined) {
      this.#insert(id, t);
      return decide(0, undefined, t, policy);
    }
    if (typeof entry === "number") {
      if (entry <= cutoff) {
        this.#log.set(id, t);
        return decide(0, undefined, t, policy);
      }
      const decision = decide(1, entry, t, policy);
      if (decision.allowed) this.#log.set(id, twoRequests(entry, t));
      return decision;
    }
    trim(entry, cutoff);
    const count = countOf(entry);
    const decision = decide(count, oldestOf(entry), t, policy);
    if (decision.allowed) {
      if (count === 0) this.#log.set(id, t);
      else add(entry, t);
    } else if (count > policy.limit) {
      // Only reachable if the limit was lowered under a live store; keep the newest `limit`.
      keepNewest(entry, policy.limit);
    }
    return decision;
  }

  /** {@inheritDoc RateLimitStore.peek} */
  peek(key: string, now: number): Decision {
    const t = this.#offset(now);
    const id = compactKey(key);
    let entry = this.#log.get(id);
    if (entry === undefined && this.#old !== undefined) entry = this.#adopt(id);
    const live = this.#live(entry, t - this.#policy.windowMs);
    return peekDecision(live.count, live.oldest, t, this.#policy);
  }

  /**
   * Forgets callers with nothing left in the window, visiting at most `budget` callers from where the
   * last sweep stopped; callers still held under the previous base time are moved across first.
   * Called every {@linkcode SWEEP_INTERVAL_MS} by the store itself; exposed for tests.
   */
  sweep(now: number, budget: number = this.#sweepBudget()): void {
    const cutoff = this.#offset(now) - this.#policy.windowMs;
    let left = this.#old === undefined ? budget : this.#migrate(cutoff, budget);
    this.#cursor ??= this.#log.entries();
    for (; left > 0; left--) {
      const next = this.#cursor.next();
      if (next.done) {
        this.#cursor = undefined;
        break;
      }
      const [key, entry] = next.value;
      // Timestamps ascend: a caller whose newest one has left the window has nothing left in it.
      const newest = newestOfEntry(entry);
      if (newest === undefined || newest <= cutoff) this.#log.delete(key);
    }
    if (this.#atCapacity && this.#size() < this.#max) this.#atCapacity = false;
  }

  /** The number of tracked and evicted callers. */
  stats(): MemoryStoreStats {
    return {
      tracked: this.#size(),
      evicted: this.#evicted,
      previousBase: this.#old?.size ?? 0,
    };
  }

  /** {@inheritDoc RateLimitStore.close} */
  close(): void {
    this.#cancelStart?.();
    this.#cancelStart = undefined;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #size(): number {
    return this.#log.size + (this.#old?.size ?? 0);
  }

  /**
   * `now` as an offset from the base time, moving the base first when `now` has drifted 2^30 ms
   * from it: offsets then stay small integers. Exact either way; only faster.
   */
  #offset(now: number): number {
    // One NaN would become every caller's timestamps at the next move of the base.
    if (!Number.isFinite(now)) throw new RangeError(`rate-limit time must be finite, got ${now}`);
    const t = now - this.#base;
    if (t < REBASE_AFTER_MS && t > -REBASE_AFTER_MS) return t;
    this.#moveBase(now);
    return 0;
  }

  /**
   * Moves the base to `now` in O(1): the current map becomes the previous base's map, drained by
   * `#adopt` and the sweep. Only if it has not drained in 2^30 ms (no sweep ran) is the rest moved
   * here, in one pass.
   */
  #moveBase(now: number): void {
    if (Number.isNaN(this.#base)) {
      this.#base = now;
      return;
    }
    if (this.#old !== undefined) this.#migrate(Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY);
    this.#old = this.#log;
    this.#shift = now - this.#base;
    this.#base = now;
    this.#log = new Map();
    this.#cursor = undefined;
    this.#oldCursor = undefined;
    this.#evictCursor = undefined;
  }

  /** Moves the caller `id` from the previous base's map to the current one. */
  #adopt(id: Key): Entry | undefined {
    const old = this.#old!;
    const entry = old.get(id);
    if (entry === undefined) return undefined;
    old.delete(id);
    const moved = this.#shifted(entry);
    this.#log.set(id, moved);
    if (old.size === 0) this.#old = undefined;
    return moved;
  }

  #shifted(entry: Entry): Entry {
    if (typeof entry === "number") return entry - this.#shift;
    shiftTimes(entry, this.#shift);
    return entry;
  }

  /**
   * Visits up to `budget` callers of the previous base's map: forgets those with nothing left after
   * `cutoff` (an offset from the current base) and moves the others across.
   *
   * @returns the budget left
   */
  #migrate(cutoff: number, budget: number): number {
    const old = this.#old!;
    const cursor = this.#oldCursor ??= old.entries();
    let left = budget;
    for (; left > 0; left--) {
      const next = cursor.next();
      if (next.done) break;
      const [key, entry] = next.value;
      old.delete(key);
      const moved = this.#shifted(entry);
      const newest = newestOfEntry(moved);
      if (newest !== undefined && newest > cutoff) this.#log.set(key, moved);
    }
    if (old.size === 0) {
      this.#old = undefined;
      this.#oldCursor = undefined;
    }
    return left;
  }

  #insert(key: Key, now: number): void {
    if (this.#size() >= this.#max) {
      if (!this.#atCapacity) {
        this.#atCapacity = true;
        this.#onCapacity?.(this.#size());
      }
      this.#evictOne();
    }
    this.#log.set(key, now);
  }

  /**
   * Forgets the caller added longest ago (those under the previous base first): bounded memory
   * matters more than one caller's count. One iterator lives across evictions: a new one per
   * eviction would step over every entry deleted since the map was last compacted (tens of
   * microseconds per request at the cap).
   */
  #evictOne(): void {
    if (this.#old !== undefined) {
      this.#migrate(Number.POSITIVE_INFINITY, 1); // forgets the first caller of the previous base
      this.#evicted++;
      return;
    }
    let oldest = this.#evictCursor?.next();
    if (oldest === undefined || oldest.done) {
      this.#evictCursor = this.#log.keys();
      oldest = this.#evictCursor.next();
    }
    if (!oldest.done) {
      this.#log.delete(oldest.value);
      this.#evicted++;
    }
  }

  #live(entry: Entry | undefined, cutoff: number): { count: number; oldest: number } {
    if (entry === undefined) return { count: 0, oldest: 0 };
    if (typeof entry === "number") {
      return entry > cutoff ? { count: 1, oldest: entry } : { count: 0, oldest: 0 };
    }
    return liveAfter(entry, cutoff);
  }

  #sweepBudget(): number {
    const passes = Math.max(1, this.#policy.windowMs / SWEEP_INTERVAL_MS);
    return Math.max(MIN_SWEEP_BUDGET, Math.ceil((this.#size() / passes) * VISITS_PER_WINDOW));
  }
}
