/**
 * The in-memory rate-limit store: one process, exact, bounded (the default store).
 *
 * @module
 */

import {
  decide,
  type Decision,
  insertInOrder,
  peekDecision,
  type RateLimitPolicy,
  type RateLimitStore,
} from "./decision.ts";
import { ipv4Value } from "./caller.ts";

/** Options of {@linkcode MemoryStore}. */
export interface MemoryStoreOptions {
  /** The most callers tracked at once; at the cap the least recently added caller is forgotten. */
  maxCallers?: number;
  /** Clock for the background sweep; defaults to `Date.now`. */
  now?: () => number;
  /** Run the background sweep every second (default true; tests sweep by hand). */
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
 * The in-memory store: one process, exact, bounded.
 *
 * Each caller holds its counted timestamps: a bare number for one request (the common case) or an
 * array kept ascending (a request from a clock that stepped back is inserted in order). With
 * hundreds of thousands of callers, hashing key strings and the garbage collector's work on them
 * dominated the cost of a decision, so two representation choices keep a caller with one request
 * free of any heap object of its own: IPv4 callers are held under their address as an integer
 * ({@linkcode compactKey}), and timestamps are kept as milliseconds since a base time, small
 * integers that V8 stores unboxed in the map. The base moves forward every 2^30 ms (about 12 days)
 * in one pass over the map: a pause of up to about 0.2 s at 500,000 callers. A sweep every second
 * walks part of the map so that the whole map is visited about once per window, and forgets callers
 * with nothing left in the window.
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
  readonly #log = new Map<number | string, number | number[]>();
  /** The time offsets count from: set by the first call, moved forward by `#rebase`. */
  #base = Number.NaN;
  #cursor: MapIterator<[number | string, number | number[]]> | undefined;
  #evictCursor: MapIterator<number | string> | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  #evicted = 0;
  #atCapacity = false;

  /** Creates a store for `policy`. */
  constructor(policy: RateLimitPolicy, options: MemoryStoreOptions = {}) {
    this.#policy = policy;
    this.#max = options.maxCallers ?? 500_000;
    this.#now = options.now ?? Date.now;
    this.#onCapacity = options.onCapacity;
    if (options.sweep ?? true) {
      const timer = setInterval(() => this.sweep(this.#now()), 1000);
      // The sweep must never keep a process (or a test) alive.
      Deno.unrefTimer(timer);
      this.#timer = timer;
    }
  }

  /** {@inheritDoc RateLimitStore.hit} */
  hit(key: string, now: number): Decision {
    const { limit, windowMs } = this.#policy;
    const t = this.#offset(now);
    const cutoff = t - windowMs;
    const id = compactKey(key);
    const entry = this.#log.get(id);
    if (entry === undefined) {
      this.#insert(id, t);
      return decide(0, undefined, t, this.#policy);
    }
    if (typeof entry === "number") {
      if (entry <= cutoff) {
        this.#log.set(id, t);
        return decide(0, undefined, t, this.#policy);
      }
      const decision = decide(1, entry, t, this.#policy);
      if (decision.allowed) this.#log.set(id, t < entry ? [t, entry] : [entry, t]);
      return decision;
    }
    let expired = 0;
    while (expired < entry.length && entry[expired]! <= cutoff) expired++;
    if (expired > 0) entry.splice(0, expired);
    const decision = decide(entry.length, entry[0], t, this.#policy);
    if (decision.allowed) {
      if (entry.length === 0) this.#log.set(id, t);
      else if (t >= entry[entry.length - 1]!) entry.push(t);
      else insertInOrder(entry, t); // the clock stepped back: the log stays ascending
    } else if (entry.length > limit) {
      // Only reachable if the limit was lowered under a live store; keep the newest `limit`.
      entry.splice(0, entry.length - limit);
    }
    return decision;
  }

  /** {@inheritDoc RateLimitStore.peek} */
  peek(key: string, now: number): Decision {
    const t = this.#offset(now);
    const live = this.#live(this.#log.get(compactKey(key)), t - this.#policy.windowMs);
    return peekDecision(live.count, live.oldest, t, this.#policy);
  }

  /**
   * Forgets callers with nothing left in the window, visiting at most `budget` callers from where the
   * last sweep stopped. Called every second by the store itself; exposed for tests.
   */
  sweep(now: number, budget = this.#sweepBudget()): void {
    const cutoff = this.#offset(now) - this.#policy.windowMs;
    this.#cursor ??= this.#log.entries();
    for (let i = 0; i < budget; i++) {
      const next = this.#cursor.next();
      if (next.done) {
        this.#cursor = undefined;
        break;
      }
      const [key, entry] = next.value;
      // Timestamps ascend: a caller whose newest one has left the window has nothing left in it.
      const newest = typeof entry === "number" ? entry : entry[entry.length - 1];
      if (newest === undefined || newest <= cutoff) this.#log.delete(key);
    }
    if (this.#atCapacity && this.#log.size < this.#max) this.#atCapacity = false;
  }

  /** The number of tracked and evicted callers. */
  stats(): MemoryStoreStats {
    return { tracked: this.#log.size, evicted: this.#evicted };
  }

  /** {@inheritDoc RateLimitStore.close} */
  close(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /**
   * `now` as an offset from the base time, moving the base (and every kept offset) first when `now`
   * has drifted 2^30 ms from it: offsets then stay small integers. Exact either way; only faster.
   */
  #offset(now: number): number {
    // One NaN would become every caller's timestamps at the next move of the base.
    if (!Number.isFinite(now)) throw new RangeError(`rate-limit time must be finite, got ${now}`);
    const t = now - this.#base;
    if (t < REBASE_AFTER_MS && t > -REBASE_AFTER_MS) return t;
    this.#rebase(now);
    return 0;
  }

  #rebase(now: number): void {
    const shift = Number.isNaN(this.#base) ? 0 : now - this.#base;
    this.#base = now;
    if (shift === 0) return;
    for (const [key, entry] of this.#log) {
      if (typeof entry === "number") this.#log.set(key, entry - shift);
      else for (let i = 0; i < entry.length; i++) entry[i] = entry[i]! - shift;
    }
  }

  #insert(key: number | string, now: number): void {
    if (this.#log.size >= this.#max) {
      if (!this.#atCapacity) {
        this.#atCapacity = true;
        this.#onCapacity?.(this.#log.size);
      }
      // Forget the caller added longest ago: bounded memory matters more than one caller's count.
      // One iterator lives across evictions: a new one per eviction would step over every entry
      // deleted since the map was last compacted (tens of microseconds per request at the cap).
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
    this.#log.set(key, now);
  }

  #live(entry: number | number[] | undefined, cutoff: number): { count: number; oldest: number } {
    if (entry === undefined) return { count: 0, oldest: 0 };
    if (typeof entry === "number") {
      return entry > cutoff ? { count: 1, oldest: entry } : { count: 0, oldest: 0 };
    }
    const first = entry.findIndex((t) => t > cutoff);
    return first === -1
      ? { count: 0, oldest: 0 }
      : { count: entry.length - first, oldest: entry[first]! };
  }

  #sweepBudget(): number {
    const seconds = Math.max(1, this.#policy.windowMs / 1000);
    return Math.max(1000, Math.ceil((this.#log.size / seconds) * 2));
  }
}
