/**
 * One circuit breaker per object of a store of many objects (Durable Objects: one per caller, or per
 * shard), kept only for the objects that failed lately: an overloaded object stops being called
 * (one probe a second) and answers only its own callers by the failure policy; the others are
 * called as ever. This is Envoy's outlier detection with the host ejected alone: no count of
 * failing objects ever switches a healthy object's callers (whether the store is down as a whole is
 * `namespace_watch.ts`'s question, answered by objects no caller owns).
 *
 * @module
 */

import { CircuitBreaker, type CircuitBreakerOptions } from "./circuit_breaker.ts";

/**
 * Most objects whose failures are kept apart (2.4 KB each with a full window of calls, measured
 * with V8's heap: 2.4 MB): a new one beyond it evicts the one added longest ago, which only costs
 * that object a call (it is asked again, and trips again if it still fails).
 */
export const MAX_FAILING_OBJECTS = 1000;

/**
 * The breakers of the objects that failed lately, one each ({@linkcode MAX_FAILING_OBJECTS} at
 * most). An object's breaker is dropped once it is closed with no failure left in its window.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const breakers = new ObjectBreakers({ minFailures: 2 });
 * breakers.failure("object a");
 * breakers.failure("object a");
 * assert.equal(breakers.get("object a")?.allow(), false, "tripped: left alone until its probe");
 * assert.equal(breakers.get("object b"), undefined, "another object is called as ever");
 * assert.equal(breakers.open, 1);
 * ```
 */
export class ObjectBreakers {
  readonly #options: CircuitBreakerOptions;
  readonly #breakers = new Map<string, CircuitBreaker>();

  /** Creates an empty set; each object's breaker will have `options`. */
  constructor(options: CircuitBreakerOptions) {
    this.#options = options;
  }

  /** How many objects' breakers are open or probing. */
  get open(): number {
    let open = 0;
    for (const breaker of this.#breakers.values()) if (breaker.state !== "closed") open++;
    return open;
  }

  /** `scope`'s breaker, if it failed lately. */
  get(scope: string): CircuitBreaker | undefined {
    return this.#breakers.get(scope);
  }

  /** Records a failed call of `scope`'s object. */
  failure(scope: string): void {
    let breaker = this.#breakers.get(scope);
    if (breaker === undefined) {
      if (this.#breakers.size >= MAX_FAILING_OBJECTS) {
        this.#breakers.delete(this.#breakers.keys().next().value!);
      }
      breaker = new CircuitBreaker(this.#options);
      this.#breakers.set(scope, breaker);
    }
    breaker.failure();
  }

  /** Records a call of `scope`'s object that answered in time. */
  success(scope: string): void {
    const breaker = this.#breakers.get(scope);
    if (breaker === undefined) return;
    breaker.success();
    if (breaker.quiet) this.#breakers.delete(scope);
  }
}
