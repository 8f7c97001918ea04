/**
 * Refusals answered from memory: a caller that a shared store (Redis, Deno KV or a Durable Object,
 * in `exact`) refused is refused again by this instance, with the same fields, without a store call,
 * until its oldest counted request leaves the window.
 *
 * Why that is exact: a refusal counts nothing, and other instances can only add hits to the
 * caller's log, never remove one, so the count stays at the limit until the oldest counted hit
 * leaves the window: `resetMs` after the store decided ({@linkcode Decision.resetMs}). The store
 * decided at some instant between the call's start and its answer, so the memo holds from the
 * call's start, by this instance's steady clock (`performance.now()`, which no step of the wall
 * clock moves; on workerd it is `Date.now()`, `timeOrigin` 0, measured: the clock the object
 * decides by too): it ends at or before the store's refusal does, however long the round trip took,
 * and whatever the store's clock reads (Redis `TIME`, the object's clock). At the exact instant
 * it ends, the store is asked again. Its answers count down as the store's would: `remaining` 0,
 * `resetSeconds` the milliseconds left rounded up, `Retry-After` the same.
 *
 * A store whose deciding clock may run faster than the steady clock (Deno KV's stamps, slewing to
 * a step of the wall clock) is held shorter by that rate (`clockRate`). A step of the store's own
 * clock during a refusal (Redis's server clock stepped by NTP) is not seen; the store itself would
 * move every caller's window by it.
 *
 * Bounded: at most {@linkcode MAX_REFUSALS} callers (about 160 bytes each with an IPv6 /64 key,
 * measured: 1.6 MB); a new one beyond it evicts the one remembered longest ago, which only costs
 * that caller a store call.
 *
 * @module
 */

import type { Decision } from "../core/decision.ts";

/** Most refused callers a {@linkcode RefusalMemo} remembers at once. */
export const MAX_REFUSALS = 10_000;

/** Options of {@linkcode RefusalMemo}. */
export interface RefusalMemoOptions {
  /** Most callers remembered (default {@linkcode MAX_REFUSALS}). */
  maxCallers?: number;
  /**
   * How much faster than the steady clock the clock that decides may run, as a fraction (Deno KV's
   * stamps follow a step of the wall clock at up to 2%: 0.02): a refusal of `resetMs` is then held
   * `resetMs / (1 + rate)` only, so that it never outlasts the store's (default 0: the store's
   * clock runs at the steady clock's rate, as Redis's and a Durable Object's do between steps).
   */
  clockRate?: number;
}

/**
 * The refused callers of one instance, each until its refusal ends.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const memo = new RefusalMemo();
 * const refused = { allowed: false, remaining: 0, resetSeconds: 2, resetMs: 1500 };
 * memo.remember("192.0.2.1", 1000, refused); // the call started at 1000 (steady clock, ms)
 * const again = memo.recall("192.0.2.1", 1600);
 * assert.deepEqual(again, { allowed: false, remaining: 0, resetSeconds: 1, resetMs: 900 });
 * assert.equal(memo.recall("192.0.2.1", 2500), undefined); // 1500 ms after the call started
 * ```
 */
export class RefusalMemo {
  readonly #maxCallers: number;
  readonly #rate: number;
  /**
   * Caller key to the steady-clock instants its refusal ends as the store counts it (the fields'
   * count-down) and as this memo holds it (never later), oldest first.
   */
  readonly #until = new Map<string, { reset: number; end: number }>();

  /** Creates an empty memo. */
  constructor(options: RefusalMemoOptions = {}) {
    const max = options.maxCallers ?? MAX_REFUSALS;
    if (!(Number.isInteger(max) && max >= 1)) {
      throw new RangeError("maxCallers must be a whole number from 1");
    }
    const rate = options.clockRate ?? 0;
    if (!(rate >= 0 && rate < 1)) throw new RangeError("clockRate must be from 0 to under 1");
    this.#maxCallers = max;
    this.#rate = rate;
  }

  /** How many callers are remembered now (expired ones included until looked up or evicted). */
  get size(): number {
    return this.#until.size;
  }

  /**
   * Keeps `decision` when it is the store's refusal with its exact reset: `key` is refused until
   * `startedAt + decision.resetMs` (steady clock, ms; `startedAt` is when the call was sent).
   */
  remember(key: string, startedAt: number, decision: Decision): void {
    const resetMs = decision.resetMs;
    if (decision.allowed || resetMs === undefined || !(resetMs > 0)) return;
    const map = this.#until;
    map.delete(key); // re-inserted last: the eviction order is the order of remembering
    if (map.size >= this.#maxCallers) map.delete(map.keys().next().value!);
    map.set(key, { reset: startedAt + resetMs, end: startedAt + resetMs / (1 + this.#rate) });
  }

  /** The refusal of `key` at `now` (steady clock, ms), if it still holds; forgets it once over. */
  recall(key: string, now: number): Decision | undefined {
    const until = this.#until.get(key);
    if (until === undefined) return undefined;
    if (now >= until.end) {
      this.#until.delete(key);
      return undefined;
    }
    const left = until.reset - now;
    return { allowed: false, remaining: 0, resetSeconds: Math.ceil(left / 1000), resetMs: left };
  }
}
