/**
 * Requests in flight for one caller share one store call while the caller is likely refused.
 *
 * A hit is a write: an admitted request is counted by its own store call, so admissions are never
 * shared. What is shared is the refused path. While a call for a caller is in flight and the caller
 * is likely refused ({@linkcode RefusalMemo.likelyRefused}: its refusal's hold has ended and the
 * memo is being refreshed, or its last admission left nothing), the caller's other requests do not
 * call the store: they wait for that call's answer and are then decided again from the top. If the
 * answer was a refusal, the memo now holds it and they are refused from memory with its fields
 * counted down; if the caller is still likely refused and nothing is in flight, the first of them
 * calls and the rest wait for it; otherwise (an admission with quota left: the store forgot the
 * caller, or its window emptied; or the store failed, which releases the hint) each calls the store
 * as any request does.
 *
 * Why that is exact: a waiting request is answered only by the memo, at the instant it is answered,
 * which is the memo's own guarantee (a refusal the store gave, held from before that call was sent,
 * never past the refusal's end), or by a store call of its own. No request is admitted without
 * the store counting it, so never more than the limit is admitted.
 *
 * A waiter never depends on the call it waits for alone: it waits at most `waitMs` (the store's
 * timeout) from when that call was sent, and at most until a deadline of its own (the guard gives
 * each request one, `waitMs` after it first waited, shared by all its waits), by a timer of its
 * own, then makes its own call. On Workers a request whose client leaves is cancelled with the
 * continuations of its call, so that call never answers here; a request waiting for it with
 * nothing of its own pending would be cancelled too ("your Worker's code had hung"). A call sent
 * longer than `waitMs` ago is no longer waited for, and is forgotten (pruned once per `waitMs`).
 *
 * What it saves: when a refused caller's hold ends while it hammers on `c` connections, one store
 * call instead of up to `c` (every connection's next request used to miss the memo during the
 * round trip). What it costs: a request of a likely refused caller waits `waitMs` at most in all
 * (a slow store answering "admitted, nothing left" again and again wakes the waiters one round
 * trip at a time, and without the deadline the last of `c` waited `c` round trips), then makes one
 * bounded call of its own. Bounded: an entry per caller with a call in flight (a lost call's until
 * pruned, so sent within two `waitMs`), a waiter and its timer per waiting request, and
 * {@linkcode SPARE_FLIGHTS} spare entries: nothing stays per caller once its calls have answered.
 *
 * The path where nobody waits allocates nothing: a caller's entry leaves the map when its last
 * call answers (or when pruned, once per `waitMs`, for a lost call) and is kept for another call's
 * ({@linkcode SPARE_FLIGHTS}); the set of waiters is made by the first request that waits.
 *
 * @module
 */

import type { RefusalMemo } from "./refusal_memo.ts";
import { later } from "../../timer.ts";

/** The calls in flight for one caller, and the requests waiting for the next to answer. */
interface Flight {
  /** Calls sent and not answered (a cancelled one never is: see `since`). */
  calls: number;
  /** When the latest call was sent (steady clock, ms): waited for until `since + waitMs`. */
  since: number;
  /** Wakes each waiting request, once; made by the first request that waits. */
  waiting: Set<() => void> | undefined;
}

/**
 * Entries kept for reuse once pruned: as many callers as one instance calls the store for within a
 * store timeout under load (a connection each), so that the path where nobody waits allocates
 * nothing; an entry is three fields.
 */
export const SPARE_FLIGHTS = 256;

/** Options of {@linkcode CallsInFlight}. */
export interface CallsInFlightOptions {
  /** The longest a request waits for another's call, in ms (the guard's store timeout). */
  waitMs: number;
  /** The steady clock the calls are timed by, in ms (the guard's). */
  clock: () => number;
}

/**
 * The store calls in flight, per caller, and who waits for them.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { RefusalMemo } from "./refusal_memo.ts";
 * const memo = new RefusalMemo({ random: () => 0 });
 * let now = 0;
 * const flights = new CallsInFlight(memo, { waitMs: 100, clock: () => now });
 * // The caller was refused; its hold is over (3 s later): its next request is likely refused.
 * memo.remember("192.0.2.1", 0, { allowed: false, remaining: 0, resetSeconds: 60, resetMs: 60_000 });
 * now = 3000;
 * flights.sent("192.0.2.1"); // one request calls the store...
 * assert.equal(flights.mustWait("192.0.2.1", 3000), true); // ...so the next waits for its answer
 * assert.equal(flights.mustWait("192.0.2.1", 3100), false); // (for 100 ms at most)
 * const woken = flights.next("192.0.2.1");
 * memo.remember("192.0.2.1", 3000, { allowed: false, remaining: 0, resetSeconds: 57, resetMs: 57_000 });
 * flights.answered("192.0.2.1");
 * await woken; // decided again: the memo holds the fresh refusal
 * assert.equal(memo.recall("192.0.2.1", 3001)?.allowed, false);
 * assert.equal(flights.mustWait("192.0.2.1", 3001), false); // nothing in flight
 * ```
 */
export class CallsInFlight {
  readonly #memo: RefusalMemo;
  readonly #waitMs: number;
  readonly #clock: () => number;
  /** Per caller. */
  readonly #flights = new Map<string, Flight>();
  /** Entries of answered callers, for the next callers' calls. */
  readonly #spare: Flight[] = [];
  /** When the entries of lost calls were last pruned (steady clock, ms). */
  #prunedAt = -Infinity;
  #waits = 0;

  /** Shares calls of the callers that `memo` says are likely refused. */
  constructor(memo: RefusalMemo, options: CallsInFlightOptions) {
    this.#memo = memo;
    this.#waitMs = options.waitMs;
    this.#clock = options.clock;
  }

  /** Times a request waited for another's call (each wait of a request counted once). */
  get waits(): number {
    return this.#waits;
  }

  /**
   * Whether a request of `key` at `now` (steady clock, ms) waits for a call in flight: one was
   * sent within `waitMs`, and the caller is likely refused.
   */
  mustWait(key: string, now: number): boolean {
    const flight = this.#flights.get(key);
    return flight !== undefined && flight.calls > 0 && now - flight.since < this.#waitMs &&
      this.#memo.likelyRefused(key, now);
  }

  /**
   * Resolves once the next call of `key` has answered and its answer is remembered, or once the
   * latest call of `key` was sent `waitMs` ago, or at `until` (steady clock, ms: the request's own
   * deadline), whichever comes first; then decide the request again. Only while
   * {@linkcode mustWait} is true.
   */
  next(key: string, until = Infinity): Promise<void> {
    const flight = this.#flights.get(key);
    if (flight === undefined) return Promise.resolve();
    this.#waits++;
    const waiting = flight.waiting ??= new Set();
    return new Promise((resolve) => {
      const wake = () => {
        cancel();
        waiting.delete(wake);
        resolve();
      };
      const cancel = later(Math.min(flight.since + this.#waitMs, until) - this.#clock(), wake);
      waiting.add(wake);
    });
  }

  /** Counts a call of `key` as sent now. */
  sent(key: string): void {
    const now = this.#clock();
    if (now - this.#prunedAt >= this.#waitMs) this.#prune(now);
    const flight = this.#flights.get(key);
    if (flight !== undefined) {
      flight.calls++;
      flight.since = now;
      return;
    }
    const spare = this.#spare.pop();
    if (spare === undefined) this.#flights.set(key, { calls: 1, since: now, waiting: undefined });
    else {
      spare.calls = 1;
      spare.since = now;
      this.#flights.set(key, spare);
    }
  }

  /**
   * Counts a call of `key` as answered (its answer remembered), and wakes its waiters. With no
   * call of the caller's left in flight its entry leaves the map, kept for another call's: the
   * process holds nothing per caller between calls (tests/limit/exact_memory_test.ts).
   */
  answered(key: string): void {
    const flight = this.#flights.get(key);
    if (flight === undefined) return;
    if (flight.calls > 0) flight.calls--;
    const waiting = flight.waiting;
    flight.waiting = undefined;
    if (flight.calls === 0) {
      this.#flights.delete(key);
      if (this.#spare.length < SPARE_FLIGHTS) this.#spare.push(flight);
    }
    if (waiting === undefined) return;
    for (const wake of waiting) wake(); // each removes itself; the set is dropped
  }

  /**
   * Forgets the callers whose latest call was sent `waitMs` ago or more (answered, or lost), and
   * keeps their entries for reuse.
   */
  #prune(now: number): void {
    this.#prunedAt = now;
    const spare = this.#spare;
    for (const [key, flight] of this.#flights) {
      if (now - flight.since < this.#waitMs) continue;
      this.#flights.delete(key);
      // Its waiters' own timers have fired, or fire now, each on the set it joined.
      flight.waiting = undefined;
      if (spare.length < SPARE_FLIGHTS) spare.push(flight);
    }
  }
}
