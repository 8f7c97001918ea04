/**
 * Refusals answered from memory: a caller that a shared store (Redis, Deno KV or a Durable Object,
 * in `exact`) refused is refused again by this instance, with the store's fields counted down,
 * without a store call, for a few seconds at most ({@linkcode MEMO_HOLD_MS}) and never past the
 * refusal's own end (its oldest counted request leaving the window).
 *
 * Why a refusal may be believed at all: a refusal counts nothing, and other instances can only add
 * hits to the caller's log, so the count stays at the limit until the oldest counted hit leaves
 * the window: `resetMs` after the store decided ({@linkcode Decision.resetMs}). Why only for a few
 * seconds: a store can also forget (an operator deleting the caller's key to unblock it, an
 * eviction, a failover that loses writes, a Redis restarted empty), and then a refusal held to its
 * end would refuse, for up to a window, a caller that a fresh instance admits. So each refusal is
 * held at most {@linkcode MEMO_HOLD_MS} from when its call was sent; then the store is asked again.
 * A store that forgets is believed within that bound (and the next call's round trip), and a
 * refused caller costs each instance at most one store call per hold.
 *
 * Holds are spread: each is shortened by a random part of {@linkcode MEMO_SPREAD_MS}, so that
 * isolates and instances that learned a refusal at one instant do not all ask the store (one Durable
 * Object, one Redis key) again at one instant. A hold is only ever shortened: it ends at or before
 * the refusal does.
 *
 * Which clock: the store decided at some instant between the call's start and its answer, so the
 * memo holds from the call's start, by this instance's steady clock (`performance.now()`, which no
 * step of the wall clock moves; on workerd it is `Date.now()`, `timeOrigin` 0, measured: the clock
 * the object decides by too): it ends at or before the store's refusal does, however long the
 * round trip took, and whatever the store's clock reads (Redis `TIME`, the object's clock). Its
 * answers count down as the store's would: `remaining` 0, `resetSeconds` the milliseconds left
 * rounded up, `Retry-After` the same. A store whose deciding clock may run faster than the steady
 * clock (Deno KV's stamps, slewing to a step of the wall clock) is held shorter by that rate
 * (`clockRate`). A step of the store's own clock during a refusal (Redis's server clock stepped by
 * NTP) is not seen; the store itself would move every caller's window by it.
 *
 * Likely refused: once a hold has ended, and until {@linkcode MEMO_HOLD_MS} after the refusal's own
 * end, or after an admission that left the caller nothing, the caller's next request is likely
 * refused ({@linkcode RefusalMemo.likelyRefused}); the guard then lets one request at a time call the
 * store for that caller and the others wait for its answer (`in_flight.ts`). It only ever decides
 * who waits, never an answer.
 *
 * Answers out of order: an answer to a call sent before the one the memo learned from changes
 * nothing. So that this holds after an admission with quota left too (the store forgot the caller,
 * or its window emptied), such an admission of a caller the memo knows leaves a tombstone, the
 * call's instant alone, for a hold ({@linkcode MEMO_HOLD_MS}: an older call's refusal would end
 * within that anyway); an admission of a caller it does not know adds nothing, so that admitted
 * callers never push refused ones out.
 *
 * Bounded: at most {@linkcode MAX_REFUSALS} callers, tombstones included (about 160 bytes each
 * with an IPv6 /64 key, measured: 1.6 MB); a new one beyond it evicts the one remembered longest
 * ago, which only costs that caller a store call.
 *
 * @module
 */

import type { Decision } from "../core/decision.ts";

/** Most refused callers a {@linkcode RefusalMemo} remembers at once. */
export const MAX_REFUSALS = 10_000;

/**
 * The longest a refusal is believed without asking the store again, in ms: a store that forgot the
 * caller is believed within this (plus a round trip). A few seconds: short beside a window (60 s by
 * default, a day at most), so an unblocked caller waits at most 3 s; long beside a round trip, so a
 * refused caller hammering at 1,000 requests/s costs one store call in 2,000 to 3,000 of them.
 */
export const MEMO_HOLD_MS = 3000;

/**
 * How much of a hold may be cut at random, in ms: every hold is drawn from 2 s to 3 s, so the
 * instances that learned a refusal together ask the store again over a second, not at one instant
 * (a whole second: a thousand slots of a millisecond's call), and each asks at most once per 2 s.
 */
export const MEMO_SPREAD_MS = 1000;

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
  /** The longest hold, in ms (default {@linkcode MEMO_HOLD_MS}; a benchmark's reference sets it). */
  holdMs?: number;
  /** How much of a hold may be cut at random, in ms (default {@linkcode MEMO_SPREAD_MS}). */
  spreadMs?: number;
  /** A random number from 0 to under 1, for the spread (default `Math.random`; tests set it). */
  random?: () => number;
}

/** What the memo knows of one caller, as instants of the steady clock (ms). */
interface Entry {
  /** When the call that told it was sent: an answer to an older call changes nothing. */
  sent: number;
  /** Until when the refusal is answered from memory (never after `reset`). */
  end: number;
  /** When the store's refusal ends as it counted it: the fields count down to it. */
  reset: number;
  /** Until when the caller's next request is likely refused (`sent` or before: not likely). */
  likely: number;
}

/**
 * The refused callers of one instance, each for a few seconds at most and never past its refusal.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const memo = new RefusalMemo({ random: () => 0 }); // no spread: held the whole MEMO_HOLD_MS
 * const refused = { allowed: false, remaining: 0, resetSeconds: 2, resetMs: 1500 };
 * memo.remember("192.0.2.1", 1000, refused); // the call started at 1000 (steady clock, ms)
 * assert.deepEqual(memo.recall("192.0.2.1", 1600), { ...refused, resetSeconds: 1, resetMs: 900 });
 * assert.equal(memo.recall("192.0.2.1", 2500), undefined); // 1500 ms after the call started
 * // A long refusal is believed MEMO_HOLD_MS at most: then the store is asked again.
 * memo.remember("192.0.2.2", 0, { ...refused, resetSeconds: 60, resetMs: 60_000 });
 * assert.equal(memo.recall("192.0.2.2", MEMO_HOLD_MS - 1)?.allowed, false);
 * assert.equal(memo.recall("192.0.2.2", MEMO_HOLD_MS), undefined);
 * assert.equal(memo.likelyRefused("192.0.2.2", MEMO_HOLD_MS), true);
 * ```
 */
export class RefusalMemo {
  readonly #maxCallers: number;
  readonly #rate: number;
  readonly #holdMs: number;
  readonly #spreadMs: number;
  readonly #random: () => number;
  /** Caller key to what is known of it, oldest first (the eviction order). */
  readonly #entries = new Map<string, Entry>();

  /** Creates an empty memo. */
  constructor(options: RefusalMemoOptions = {}) {
    const max = options.maxCallers ?? MAX_REFUSALS;
    if (!(Number.isInteger(max) && max >= 1)) {
      throw new RangeError("maxCallers must be a whole number from 1");
    }
    const rate = options.clockRate ?? 0;
    if (!(rate >= 0 && rate < 1)) throw new RangeError("clockRate must be from 0 to under 1");
    const hold = options.holdMs ?? MEMO_HOLD_MS;
    const spread = options.spreadMs ?? MEMO_SPREAD_MS;
    if (!(hold > 0 && spread >= 0 && spread < hold)) {
      throw new RangeError("holdMs must be above 0, and spreadMs from 0 to under holdMs");
    }
    this.#maxCallers = max;
    this.#rate = rate;
    this.#holdMs = hold;
    this.#spreadMs = spread;
    this.#random = options.random ?? Math.random;
  }

  /** How many callers are remembered now (expired ones included until looked up or evicted). */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * Learns from the store's `decision` on `key`, whose call was sent at `sent` (steady clock, ms):
   * a refusal with its exact reset is held from `sent` for a spread hold of at most
   * {@linkcode MEMO_HOLD_MS}, never past `sent + resetMs`; an admission that left nothing makes the
   * next request likely refused; any other admission leaves only `sent` of a caller the memo knows
   * (a tombstone, for a hold). An answer to a call sent before the one the memo holds changes
   * nothing.
   */
  remember(key: string, sent: number, decision: Decision): void {
    const known = this.#entries.get(key);
    if (known !== undefined && sent < known.sent) return;
    const resetMs = decision.resetMs;
    if (!decision.allowed && resetMs !== undefined && resetMs > 0) {
      const hold = this.#holdMs - this.#random() * this.#spreadMs;
      const reset = sent + resetMs;
      const end = sent + Math.min(resetMs / (1 + this.#rate), hold);
      this.#set(key, { sent, end, reset, likely: reset + this.#holdMs });
    } else if (decision.allowed && decision.remaining === 0) {
      const likely = sent + decision.resetSeconds * 1000 + this.#holdMs;
      this.#set(key, { sent, end: sent, reset: sent, likely });
    } else if (decision.allowed && known !== undefined) {
      this.#set(key, { sent, end: sent, reset: sent, likely: sent });
    }
  }

  /** The refusal of `key` at `now` (steady clock, ms), if it is still held. */
  recall(key: string, now: number): Decision | undefined {
    const entry = this.#live(key, now);
    if (entry === undefined || now >= entry.end) return undefined;
    const left = entry.reset - now;
    return { allowed: false, remaining: 0, resetSeconds: Math.ceil(left / 1000), resetMs: left };
  }

  /**
   * Whether `key`'s next request at `now` is likely refused: the store refused it and the hold
   * has ended (until {@linkcode MEMO_HOLD_MS} after the refusal's end), or it was admitted with
   * nothing left.
   */
  likelyRefused(key: string, now: number): boolean {
    const entry = this.#live(key, now);
    return entry !== undefined && now < entry.likely;
  }

  /**
   * Forgets that `key` is likely refused (the store failed to answer for it), unless a refusal is
   * still held at `now`: the requests that waited for that answer then each ask the store.
   */
  release(key: string, now: number): void {
    const entry = this.#entries.get(key);
    if (entry !== undefined && now >= entry.end) entry.likely = entry.sent; // its tombstone
  }

  #set(key: string, entry: Entry): void {
    const entries = this.#entries;
    entries.delete(key); // re-inserted last: the eviction order is the order of remembering
    if (entries.size >= this.#maxCallers) entries.delete(entries.keys().next().value!);
    entries.set(key, entry);
  }

  /**
   * `key`'s entry while it says anything at `now` (a tombstone says when its call was sent, for a
   * hold); forgets it once over.
   */
  #live(key: string, now: number): Entry | undefined {
    const entry = this.#entries.get(key);
    if (entry === undefined || now < Math.max(entry.likely, entry.sent + this.#holdMs)) {
      return entry;
    }
    this.#entries.delete(key);
    return undefined;
  }
}
