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
 * timeout) from when that call was sent, by a timer of its own, then makes its own call. On
 * Workers a request whose client leaves is cancelled with the continuations of its call, so that
 * call never answers here; a request waiting for it with nothing of its own pending would be
 * cancelled too ("your Worker's code had hung"). A call sent longer than `waitMs` ago is no longer
 * waited for, and is forgotten once it is the oldest.
 *
 * What it saves: when a refused caller's hold ends while it hammers on `c` connections, one store
 * call instead of up to `c` (every connection's next request used to miss the memo during the
 * round trip). What it costs: a request of a likely refused caller may wait one round trip (two, if
 * the store then admits with nothing left); if the call it waits for fails, it then makes its own,
 * and if that call does not answer within `waitMs`, likewise: at most `waitMs` and one bounded call
 * of its own. Bounded: an entry per caller with a call sent within `waitMs` (older ones pruned as
 * calls are sent), a waiter and its timer per waiting request.
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
  /** Wakes each waiting request, once. */
  waiting: Set<() => void>;
}

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
  /** Per caller, oldest call first (a caller's entry moves last as it sends). */
  readonly #flights = new Map<string, Flight>();
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
   * latest call of `key` was sent `waitMs` ago, whichever comes first; then decide the request
   * again. Only while {@linkcode mustWait} is true.
   */
  next(key: string): Promise<void> {
    const flight = this.#flights.get(key);
    if (flight === undefined) return Promise.resolve();
    this.#waits++;
    return new Promise((resolve) => {
      const wake = () => {
        cancel();
        flight.waiting.delete(wake);
        resolve();
      };
      const cancel = later(flight.since + this.#waitMs - this.#clock(), wake);
      flight.waiting.add(wake);
    });
  }

  /** Counts a call of `key` as sent now; forgets the callers whose latest call is long gone. */
  sent(key: string): void {
    const now = this.#clock();
    const flights = this.#flights;
    for (const [old, flight] of flights) {
      if (now - flight.since < this.#waitMs) break;
      flights.delete(old); // its waiters' own timers have fired, or fire now
    }
    const flight = flights.get(key);
    flights.delete(key); // re-inserted last: the map stays in the order of the latest calls
    flights.set(key, {
      calls: (flight?.calls ?? 0) + 1,
      since: now,
      waiting: flight?.waiting ?? new Set(),
    });
  }

  /** Counts a call of `key` as answered (its answer remembered), and wakes its waiters. */
  answered(key: string): void {
    const flight = this.#flights.get(key);
    if (flight === undefined) return;
    flight.calls = Math.max(0, flight.calls - 1);
    if (flight.calls === 0) this.#flights.delete(key);
    for (const wake of [...flight.waiting]) wake();
  }
}
