/**
 * The exact sliding logs one rate-limiter Durable Object keeps (`lib/workers/rate_limiter_object.ts`),
 * as plain state with no runtime API, so that the decision is the one every store makes
 * ({@linkcode decide}) and is tested under Deno like the other stores.
 *
 * Each caller's log is its newest counted timestamps, ascending, at most `limit` of them, whatever
 * the window: a sliding log, not an estimate. Only the newest `limit` hits can ever refuse a caller,
 * so keeping them, and not trimming by the window of the call, makes the answer right under any
 * window a later deployment sets: a window lengthened in a deploy counts the hits it now covers,
 * and hands out no quota. The object is the one owner of its callers (the platform runs exactly one
 * instance of an object), so its memory is the authority and its storage the durable copy: every
 * change a decision makes is reported so that the object writes it through.
 *
 * Bounded: an object holds at most {@linkcode OBJECT_MAX_TIMESTAMPS} timestamps, so at most
 * `floor(OBJECT_MAX_TIMESTAMPS / limit)` callers ({@linkcode maxCallersOf}); at the cap the caller
 * added longest ago is forgotten (as the memory store does), and its stored log deleted. A caller
 * whose newest counted request is older than {@linkcode IDLE_AFTER_MS} (the longest window the
 * store takes, so no window of any deployment still counts it) is idle and is dropped by
 * {@linkcode CallerLogs.sweep}, which the object runs from an alarm.
 *
 * A caller may be kept in memory only (`inMemory`: its /48 is past the new callers' budget,
 * `lib/workers/new_caller_gate.ts`): decided exactly as any, its first hit is not written, and its
 * next request, while the object still holds it, writes its whole log. So such a caller holds one
 * hit at most that storage does not, and the object's memory is exact for it as for any other.
 *
 * @module
 */

import {
  decide,
  type Decision,
  insertInOrder,
  peekDecision,
  type RateLimitPolicy,
} from "../core/decision.ts";

/** The most timestamps one object holds in memory and in storage (8 MB of float64s). */
export const OBJECT_MAX_TIMESTAMPS = 1_000_000;

/**
 * The highest limit the Durable Object store takes: one caller's log is one stored value, and a
 * value of the key-value storage backend holds at most 128 KiB (10,000 float64s are 80,000 bytes).
 */
export const DURABLE_MAX_LIMIT = 10_000;

/**
 * How long after its newest counted request a caller is kept: the longest window the store takes
 * (a day). A caller kept only one window of the call would come back with its hits forgotten under
 * a window lengthened since.
 */
export const IDLE_AFTER_MS = 86_400_000;

/** The longest caller key the store takes, in UTF-16 code units (caller keys are addresses). */
export const MAX_KEY_LENGTH = 256;

/** What a decision changed, for the object to write through to its storage. */
export interface LogChange {
  /** The caller whose log changed: store `log` under it, or delete it when `log` is undefined. */
  key: string;
  /** The caller's log now, ascending; undefined when the caller was forgotten. */
  log: readonly number[] | undefined;
}

/** A decision and the changes to write through (empty when nothing was counted). */
export interface LoggedDecision {
  /** The decision on the request. */
  decision: Decision;
  /** The logs to store or delete, in order. */
  changes: LogChange[];
}

/** What {@linkcode CallerLogs.sweep} removed, and when the next caller becomes idle. */
export interface SweepResult {
  /** Callers forgotten because nothing of theirs is left in the window. */
  removed: string[];
  /** When the next remaining caller becomes idle (ms since the epoch); undefined when none is left. */
  nextAt: number | undefined;
}

/**
 * The most callers one object holds under `policy`: its timestamp budget over the limit.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(maxCallersOf({ limit: 60, windowMs: 60_000 }), 16_666);
 * assert.equal(maxCallersOf({ limit: 10_000, windowMs: 60_000 }), 100);
 * ```
 */
export function maxCallersOf(policy: RateLimitPolicy): number {
  return Math.max(1, Math.floor(OBJECT_MAX_TIMESTAMPS / policy.limit));
}

/**
 * Throws a `RangeError` unless `policy` is one the Durable Object store can hold: a whole limit
 * from 1 to {@linkcode DURABLE_MAX_LIMIT} and a window of whole seconds, at most a day.
 */
export function checkDurablePolicy(policy: RateLimitPolicy): void {
  const { limit, windowMs } = policy;
  if (!Number.isInteger(limit) || limit < 1 || limit > DURABLE_MAX_LIMIT) {
    throw new RangeError(`the Durable Object store holds a limit of 1 to ${DURABLE_MAX_LIMIT}`);
  }
  if (!Number.isInteger(windowMs) || windowMs < 1000 || windowMs > IDLE_AFTER_MS) {
    throw new RangeError("the Durable Object store holds a window of 1 s to a day");
  }
}

/** Throws a `RangeError` unless `key` is a caller key the store takes. */
export function checkKey(key: string): void {
  if (typeof key !== "string" || key.length === 0 || key.length > MAX_KEY_LENGTH) {
    throw new RangeError(`a caller key is 1 to ${MAX_KEY_LENGTH} characters`);
  }
}

/**
 * The stored value of a log read back: ascending finite times, at most `DURABLE_MAX_LIMIT`;
 * anything else (a foreign or damaged value) is an empty log.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(logOfStored(new Float64Array([1, 2, 3])), [1, 2, 3]);
 * assert.deepEqual(logOfStored(new Float64Array([2, 1])), []);
 * assert.deepEqual(logOfStored("not a log"), []);
 * ```
 */
export function logOfStored(value: unknown): number[] {
  if (!(value instanceof Float64Array) || value.length > DURABLE_MAX_LIMIT) return [];
  const log = Array.from(value);
  for (let i = 0; i < log.length; i++) {
    if (!Number.isFinite(log[i]!) || (i > 0 && log[i]! < log[i - 1]!)) return [];
  }
  return log;
}

/**
 * The logs of the callers one object owns.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const logs = new CallerLogs();
 * const policy = { limit: 2, windowMs: 60_000 };
 * const first = logs.hit("192.0.2.1", 1_000_000, policy);
 * assert.deepEqual(first.decision, { allowed: true, remaining: 1, resetSeconds: 60 });
 * assert.deepEqual(first.changes, [{ key: "192.0.2.1", log: [1_000_000] }]);
 * logs.hit("192.0.2.1", 1_001_000, policy);
 * const third = logs.hit("192.0.2.1", 1_002_000, policy);
 * assert.equal(third.decision.allowed, false);
 * assert.deepEqual(third.changes, []); // a refusal is not counted, so nothing is written
 * assert.deepEqual(logs.sweep(1_061_000).removed, []); // kept a day: a longer window may count it
 * assert.deepEqual(logs.sweep(1_001_000 + IDLE_AFTER_MS).removed, ["192.0.2.1"]);
 * ```
 */
export class CallerLogs {
  readonly #logs = new Map<string, number[]>();
  /** Callers held in memory only: nothing of theirs is stored. */
  readonly #unwritten = new Set<string>();
  #timestamps = 0;

  /** Callers held now. */
  get callers(): number {
    return this.#logs.size;
  }

  /** Timestamps held now, over every caller. */
  get timestamps(): number {
    return this.#timestamps;
  }

  /** Whether `key` is held: it has a log here (and, once written through, in storage). */
  has(key: string): boolean {
    return this.#logs.has(key);
  }

  /** Callers held in memory only now (their first hit not written). */
  get unwritten(): number {
    return this.#unwritten.size;
  }

  /** Takes `key`'s stored log (read back with {@linkcode logOfStored}) at start. */
  load(key: string, log: number[]): void {
    if (log.length === 0 || this.#logs.has(key)) return;
    this.#logs.set(key, log);
    this.#timestamps += log.length;
  }

  /**
   * Decides on a request of `key` at `now` and counts it when admitted. A caller not held yet is
   * kept in memory only when `inMemory` (its change not reported); a caller kept so is written,
   * its whole log, at its next request, admitted or not.
   */
  hit(key: string, now: number, policy: RateLimitPolicy, inMemory = false): LoggedDecision {
    let log = this.#logs.get(key);
    const changes: LogChange[] = [];
    let unwritten = false;
    if (log === undefined) {
      // A new caller: make room first, so that the cap holds with it.
      this.#makeRoom(maxCallersOf(policy) - 1, changes);
      log = [];
      unwritten = inMemory;
    } else {
      this.#timestamps -= log.length;
      log = live(log, now - IDLE_AFTER_MS);
    }
    // A limit lower than the log (lowered, or an isolate still on the lower one during a gradual
    // deploy) decides on the newest `limit` hits; a refusal keeps the rest, which an isolate on the
    // higher limit still counts. Admitted, fewer than `limit` of them are in the window, so what is
    // older is out of it too, and only the newest `limit` are kept.
    const view = log.length > policy.limit ? log.slice(log.length - policy.limit) : log;
    const first = firstLive(view, now - policy.windowMs);
    const decision = decide(view.length - first, view[first], now, policy);
    if (decision.allowed) {
      log = view;
      insertInOrder(log, now);
      // Admitted under the limit, so the oldest is out of the window: the newest `limit` stay.
      if (log.length > policy.limit) log.shift();
    }
    // Never empty here: a caller with nothing in the window is admitted.
    this.#logs.set(key, log);
    this.#timestamps += log.length;
    if (unwritten) this.#unwritten.add(key);
    else if (this.#unwritten.delete(key) || decision.allowed) changes.push({ key, log });
    return { decision, changes };
  }

  /** Reports `key`'s state at `now` without counting anything. */
  peek(key: string, now: number, policy: RateLimitPolicy): Decision {
    const log = live(this.#logs.get(key) ?? [], now - policy.windowMs);
    return peekDecision(log.length, log[0], now, policy);
  }

  /**
   * Forgets every caller whose newest counted request is at or before `now - idleAfterMs` (by
   * default the longest window: nothing of theirs counts under any window), and says when the next
   * of the others becomes idle. Callers kept in memory only are forgotten alike, but neither
   * `removed` (nothing of theirs is stored) nor waited for (`nextAt`: no alarm is set for them).
   */
  sweep(now: number, idleAfterMs: number = IDLE_AFTER_MS): SweepResult {
    const removed: string[] = [];
    let nextAt: number | undefined;
    for (const [key, log] of this.#logs) {
      const idleAt = log[log.length - 1]! + idleAfterMs;
      const stored = !this.#unwritten.has(key);
      if (idleAt <= now) {
        this.#forget(key, log);
        if (stored) removed.push(key);
      } else if (stored && (nextAt === undefined || idleAt < nextAt)) {
        nextAt = idleAt;
      }
    }
    return { removed, nextAt };
  }

  /** Forgets the callers added longest ago until at most `keep` are held. */
  #makeRoom(keep: number, changes: LogChange[]): void {
    for (const [key, log] of this.#logs) {
      if (this.#logs.size <= keep) return;
      if (!this.#forget(key, log)) changes.push({ key, log: undefined });
    }
  }

  /** Forgets `key`, whose log is `log`; says whether it was held in memory only. */
  #forget(key: string, log: number[]): boolean {
    this.#logs.delete(key);
    this.#timestamps -= log.length;
    return this.#unwritten.delete(key);
  }
}

/**
 * The index of `log`'s first timestamp after `cutoff` (its length when none is), by bisection: a
 * log keeps its newest `limit` hits whatever the window, so most of a long one may be out of it.
 */
function firstLive(log: readonly number[], cutoff: number): number {
  let low = 0;
  let high = log.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (log[middle]! <= cutoff) low = middle + 1;
    else high = middle;
  }
  return low;
}

/** `log` without the timestamps at or before `cutoff` (the same array when none is). */
function live(log: number[], cutoff: number): number[] {
  const expired = firstLive(log, cutoff);
  return expired === 0 ? log : log.slice(expired);
}
