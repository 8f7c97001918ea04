/**
 * Whether a store of many objects is down as a whole (a Durable Object namespace: a platform
 * outage, a deployment gone wrong), told by objects that no caller owns: the canaries.
 *
 * Not by counting the callers' objects that fail: a caller key is the caller's to choose, and so,
 * for an attacker, is whether its object fails (overloading it is enough). Three attacker addresses
 * were "most of the objects called" in a quiet isolate and switched every caller to the failure
 * policy; "a caller whose object succeeded fails now" is no better, since an attacker's object
 * succeeds until its owner makes it fail. A canary is an object the isolate names itself, never a
 * caller key, so no request reaches it: when a caller's object fails, the watch asks the canaries
 * (at most once per `probeIntervalMs`); when every canary fails too, the namespace is down (the
 * watch opens) and the failure policy answers every caller without a call; one canary answering
 * again closes it. So an outage is known within two store timeouts of the first failed call, with
 * one caller or a thousand (that call, then the canaries in parallel), and no number of failing
 * caller keys can open the watch: Envoy's outlier detection ejects a failing host alone, and here
 * the failing keys never decide for the healthy ones.
 *
 * @module
 */

import type { BreakerState } from "./circuit_breaker.ts";

/** Options of {@linkcode NamespaceWatch}. */
export interface NamespaceWatchOptions {
  /**
   * One call per canary, each already bounded by the store timeout: it resolves when its object
   * answered, rejects when it failed or was late. At least one.
   */
  canaries: ReadonlyArray<() => Promise<unknown>>;
  /** The least time between two checks, in ms (the breakers' probe interval). */
  probeIntervalMs: number;
  /** Clock, in ms. */
  clock: () => number;
}

/** What a check found. */
export interface WatchOutcome {
  /** `tripped`: the namespace went down; `recovered`: it is back; undefined: no change. */
  transition: "tripped" | "recovered" | undefined;
  /** A canary's failure, when every canary failed. */
  error?: unknown;
}

/**
 * The watch over a namespace: closed (up), open (down), half-open (down, a check under way).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * let failing = true;
 * const canary = () => failing ? Promise.reject(new Error("overloaded")) : Promise.resolve();
 * let now = 0;
 * const watch = new NamespaceWatch({ canaries: [canary, canary], probeIntervalMs: 1000, clock: () => now });
 * assert.deepEqual((await watch.check()).transition, "tripped");
 * assert.equal(watch.state, "open");
 * assert.equal(watch.due, false, "checked again only after the interval");
 * now += 1000;
 * failing = false;
 * assert.deepEqual(await watch.check(), { transition: "recovered" });
 * assert.equal(watch.state, "closed");
 * ```
 */
export class NamespaceWatch {
  readonly #canaries: ReadonlyArray<() => Promise<unknown>>;
  readonly #probeIntervalMs: number;
  readonly #clock: () => number;
  #state: BreakerState = "closed";
  #checking = false;
  #nextAt = Number.NEGATIVE_INFINITY;

  /** Creates a closed watch; throws a `RangeError` without a canary. */
  constructor(options: NamespaceWatchOptions) {
    if (options.canaries.length === 0) throw new RangeError("a namespace watch needs a canary");
    this.#canaries = options.canaries;
    this.#probeIntervalMs = options.probeIntervalMs;
    this.#clock = options.clock;
  }

  /** Where the watch stands (the `ratelimit.breaker.state` metric of a store of many objects). */
  get state(): BreakerState {
    return this.#state;
  }

  /** Whether the namespace is down (open, or checked again while down). */
  get down(): boolean {
    return this.#state !== "closed";
  }

  /** Whether a check may start now: none under way, and the interval since the last one is over. */
  get due(): boolean {
    return !this.#checking && this.#clock() >= this.#nextAt;
  }

  /**
   * Asks every canary at once: down when all of them fail, up when one answers. The caller awaits
   * it (on Workers an object call belongs to the request that made it), so only the request that
   * found a failure, or the one that comes when a down namespace is due for a probe, waits for it.
   */
  check(): Promise<WatchOutcome> {
    const from = this.#state;
    this.#checking = true;
    if (from === "open") this.#state = "half-open";
    const calls = this.#canaries.map((canary) => {
      try {
        return canary();
      } catch (error) {
        return Promise.reject(error);
      }
    });
    return Promise.allSettled(calls).then((results) => {
      this.#checking = false;
      this.#nextAt = this.#clock() + this.#probeIntervalMs;
      const failed = results.find((result) => result.status === "fulfilled") === undefined;
      if (failed) {
        this.#state = "open";
        const error = (results[0] as PromiseRejectedResult).reason;
        return { transition: from === "closed" ? "tripped" : undefined, error };
      }
      this.#state = "closed";
      return { transition: from === "closed" ? undefined : "recovered" };
    });
  }
}
