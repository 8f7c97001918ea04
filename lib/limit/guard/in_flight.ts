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
 * What it saves: when a refused caller's hold ends while it hammers on `c` connections, one store
 * call instead of up to `c` (every connection's next request used to miss the memo during the
 * round trip); after the refusal's end, one admitted and one refused call instead of `c`. What
 * it costs: a request of a likely refused caller may wait one round trip (two, if the store then
 * admits with nothing left); if the call it waits for fails or times out, it then makes its own,
 * so it waits at most two bounded calls. Bounded: an entry per caller with a call in flight, a
 * waiter per waiting request, both gone when the calls answer.
 *
 * @module
 */

import type { RefusalMemo } from "./refusal_memo.ts";

/** The calls in flight for one caller, and the requests waiting for the next to answer. */
interface Flight {
  calls: number;
  waiting: Array<() => void>;
}

/**
 * The store calls in flight, per caller, and who waits for them.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { RefusalMemo } from "./refusal_memo.ts";
 * const memo = new RefusalMemo({ random: () => 0 });
 * const flights = new CallsInFlight(memo);
 * // The caller was refused; its hold is over (3 s later): its next request is likely refused.
 * memo.remember("192.0.2.1", 0, { allowed: false, remaining: 0, resetSeconds: 60, resetMs: 60_000 });
 * flights.sent("192.0.2.1"); // one request calls the store...
 * assert.equal(flights.mustWait("192.0.2.1", 3000), true); // ...so the next waits for its answer
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
  readonly #flights = new Map<string, Flight>();
  #waits = 0;

  /** Shares calls of the callers that `memo` says are likely refused. */
  constructor(memo: RefusalMemo) {
    this.#memo = memo;
  }

  /** Times a request waited for another's call (each wait of a request counted once). */
  get waits(): number {
    return this.#waits;
  }

  /** Whether a request of `key` at `now` (steady clock, ms) waits for a call in flight. */
  mustWait(key: string, now: number): boolean {
    return this.#flights.has(key) && this.#memo.likelyRefused(key, now);
  }

  /**
   * Resolves once the next call of `key` has answered and its answer is remembered; then decide
   * the request again. Only while {@linkcode mustWait} is true.
   */
  next(key: string): Promise<void> {
    const flight = this.#flights.get(key);
    if (flight === undefined) return Promise.resolve();
    this.#waits++;
    return new Promise((resolve) => flight.waiting.push(resolve));
  }

  /** Counts a call of `key` as sent. */
  sent(key: string): void {
    const flight = this.#flights.get(key);
    if (flight === undefined) this.#flights.set(key, { calls: 1, waiting: [] });
    else flight.calls++;
  }

  /** Counts a call of `key` as answered (its answer remembered), and wakes its waiters. */
  answered(key: string): void {
    const flight = this.#flights.get(key);
    if (flight === undefined) return;
    flight.calls--;
    const waiting = flight.waiting;
    flight.waiting = [];
    if (flight.calls === 0) this.#flights.delete(key);
    for (const wake of waiting) wake();
  }
}
