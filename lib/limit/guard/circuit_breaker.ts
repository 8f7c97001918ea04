/**
 * A circuit breaker over a window of calls: it trips on a sustained failure rate, not on one slow
 * call, and recovers by probing.
 *
 * Closed, it records the outcome of every call; it trips (opens) when the calls of the last
 * `windowMs`, at most `windowCalls` of them, hold at least `minFailures` failures that are at least
 * `failureRatio` of those calls. Open, it refuses every call for `probeIntervalMs`, then lets one
 * call through (half-open): its success closes the breaker and forgets the window, its failure opens
 * it for another interval. One breaker guards one thing that fails as a whole: a store that is one
 * server (Redis, Deno KV), or one object of a store of many (`guarded_store.ts`); whether a store of
 * many objects is down as a whole is not a count of its objects' failures (`namespace_watch.ts`).
 *
 * Written here rather than taken from npm:opossum: the guard must stay synchronous for stores that
 * answer synchronously, and its timeouts must discount a busy event loop, which opossum's timer
 * does not; the breaker itself is this one file.
 *
 * @module
 */

/** Options of {@linkcode CircuitBreaker}. */
export interface CircuitBreakerOptions {
  /** The most recent calls looked at (default 20). */
  windowCalls?: number;
  /** How far back a call counts, in ms (default 10,000). */
  windowMs?: number;
  /** Failures in the window needed to trip (default 5). */
  minFailures?: number;
  /** The share of failed calls in the window needed to trip (default 0.5). */
  failureRatio?: number;
  /** How long to refuse calls after tripping before one probe, in ms (default 1000). */
  probeIntervalMs?: number;
  /** Clock; defaults to `Date.now`. */
  clock?: () => number;
}

/** Where a breaker stands. */
export type BreakerState = "closed" | "open" | "half-open";

/** What a recorded outcome did to the breaker. */
export type BreakerTransition = "tripped" | "recovered" | undefined;

/** The defaults of {@linkcode CircuitBreakerOptions}. */
export const BREAKER_DEFAULTS = {
  windowCalls: 20,
  windowMs: 10_000,
  minFailures: 5,
  failureRatio: 0.5,
  probeIntervalMs: 1000,
} as const;

/**
 * The breaker: ask {@linkcode CircuitBreaker.allow} before a call, then record its outcome.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const breaker = new CircuitBreaker({ minFailures: 2, failureRatio: 0.5 });
 * assert.equal(breaker.failure(), undefined); // one failure is not an outage
 * assert.equal(breaker.failure(), "tripped");
 * assert.equal(breaker.allow(), false);
 * ```
 */
export class CircuitBreaker {
  readonly #windowCalls: number;
  readonly #windowMs: number;
  readonly #minFailures: number;
  readonly #failureRatio: number;
  readonly #probeIntervalMs: number;
  readonly #clock: () => number;
  /** Recent outcomes, oldest first: [time, failed]. */
  #calls: Array<[number, boolean]> = [];
  #state: BreakerState = "closed";
  #retryAt = 0;

  /** Creates a closed breaker. */
  constructor(options: CircuitBreakerOptions = {}) {
    this.#windowCalls = options.windowCalls ?? BREAKER_DEFAULTS.windowCalls;
    this.#windowMs = options.windowMs ?? BREAKER_DEFAULTS.windowMs;
    this.#minFailures = options.minFailures ?? BREAKER_DEFAULTS.minFailures;
    this.#failureRatio = options.failureRatio ?? BREAKER_DEFAULTS.failureRatio;
    this.#probeIntervalMs = options.probeIntervalMs ?? BREAKER_DEFAULTS.probeIntervalMs;
    this.#clock = options.clock ?? Date.now;
  }

  /** Where the breaker stands now. */
  get state(): BreakerState {
    return this.#state;
  }

  /** Closed, with no failure among the calls it remembers: nothing to keep it for. */
  get quiet(): boolean {
    return this.#state === "closed" && !this.#calls.some(([, failed]) => failed);
  }

  /** What {@linkcode allow} would answer now, without taking the probe. */
  wouldAllow(): boolean {
    if (this.#state === "closed") return true;
    return this.#state === "open" && this.#clock() >= this.#retryAt;
  }

  /** Whether a call may go to the store now; when open and the interval is over, this is the probe. */
  allow(): boolean {
    if (this.#state === "closed") return true;
    if (this.#state === "half-open" || this.#clock() < this.#retryAt) return false;
    this.#state = "half-open";
    return true;
  }

  /** Records a call that answered in time. */
  success(): BreakerTransition {
    if (this.#state !== "closed") {
      this.#state = "closed";
      this.#calls = [];
      return "recovered";
    }
    this.#record(false);
    return undefined;
  }

  /** Records a call that failed or timed out. */
  failure(): BreakerTransition {
    const now = this.#clock();
    if (this.#state !== "closed") {
      this.#state = "open";
      this.#retryAt = now + this.#probeIntervalMs;
      return undefined;
    }
    this.#record(true);
    if (!this.#trips()) return undefined;
    this.#state = "open";
    this.#retryAt = now + this.#probeIntervalMs;
    return "tripped";
  }

  /** Whether the window's failures are an outage (see the module's description). */
  #trips(): boolean {
    const failed = this.#calls.filter(([, failed]) => failed).length;
    return failed >= this.#minFailures && failed >= this.#failureRatio * this.#calls.length;
  }

  #record(failed: boolean): void {
    const now = this.#clock();
    this.#calls.push([now, failed]);
    let drop = Math.max(0, this.#calls.length - this.#windowCalls);
    while (drop < this.#calls.length && this.#calls[drop]![0] <= now - this.#windowMs) drop++;
    if (drop > 0) this.#calls.splice(0, drop);
  }
}
