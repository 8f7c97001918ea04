/**
 * A rate-limit store over Deno KV, for several processes or isolates sharing one limit: several
 * `deno serve --parallel` workers on one SQLite file, or Deno Deploy's isolates on the platform's
 * database.
 *
 * Each caller's log is one KV entry: its counted timestamps, ascending, as little-endian float64s.
 * A decision reads the entry and, when it admits, writes it back in an atomic operation that checks
 * the versionstamp it read; if another process wrote in between, the operation fails and the decision
 * is taken again on the fresh log (a bounded number of times). So the sliding window is exact across
 * every process on the same database. `expireIn` (two windows) only lets the database forget idle
 * callers; no decision depends on it.
 *
 * Requests of one caller that arrive while a decision for it is in flight in this process are decided
 * together on the next read, in arrival order, with one write: a burst from one caller costs a few
 * round trips instead of one conflict per request.
 *
 * Deno KV needs `--unstable-kv` (set in deno.json's `unstable`).
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
} from "../core/decision.ts";
import { KV_MAX_LIMIT } from "./kv_limit.ts";

/** Extra life of an entry past the window, so that clean-up never races a decision. */
const EXPIRY_GRACE_MS = 1000;

/**
 * An entry lives two windows (and the grace): the database expires it by its own wall clock, which
 * may have been stepped up to a window ahead of the stamps (`clock/steady_clock.ts`'s `kvClock` follows a
 * step within a window only slowly), and a live log must not be forgotten.
 */
const EXPIRY_WINDOWS = 2;

/** Options of {@linkcode KvStore}. */
export interface KvStoreOptions {
  /** Key prefix of the log entries (default `["rate_limit"]`). */
  prefix?: Deno.KvKey;
  /** Attempts of one decision when other processes keep writing the same caller (default 10). */
  maxAttempts?: number;
  /** Close the database with the store (default false: whoever opened it closes it). */
  ownsKv?: boolean;
  /**
   * Receives the newest stamp of every log read: Deno KV has no clock of its own, so a stamp in this
   * instance's future is how a clock ahead of it shows (`clock/store_clock.ts`).
   */
  onStamp?: (newest: number) => void;
  /**
   * The decisions' clock (ms since the epoch): when set, `hit` and `peek` stamp by it and ignore the
   * time they are passed. The service passes `clock/steady_clock.ts`'s `kvClock`, which a step of the wall
   * clock moves only at a bounded rate.
   */
  clock?: () => number;
}

/** Counters of a {@linkcode KvStore}, for tests, operators and the benchmark. */
export interface KvStoreStats {
  /** Reads and atomic commits sent to the database. */
  roundTrips: number;
  /** Commits that failed their versionstamp check or found the database locked. */
  conflicts: number;
  /** Requests refused because every attempt conflicted. */
  contended: number;
}

interface Pending {
  now: number;
  resolve: (decision: Decision) => void;
  reject: (error: unknown) => void;
}

/**
 * The Deno KV store.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const kv = await Deno.openKv(":memory:");
 * const store = new KvStore(kv, { limit: 60, windowMs: 60_000 }, { ownsKv: true });
 * const decision = await store.hit("192.0.2.1", Date.now());
 * assert.deepEqual(decision, { allowed: true, remaining: 59, resetSeconds: 60 });
 * store.close();
 * ```
 */
export class KvStore implements RateLimitStore {
  readonly #kv: Deno.Kv;
  readonly #policy: RateLimitPolicy;
  readonly #prefix: Deno.KvKey;
  readonly #maxAttempts: number;
  readonly #ownsKv: boolean;
  readonly #onStamp: ((newest: number) => void) | undefined;
  readonly #clock: (() => number) | undefined;
  readonly #lanes = new Map<string, Pending[]>();
  #roundTrips = 0;
  #conflicts = 0;
  #contended = 0;

  /** Creates a store for `policy` over an open database. */
  constructor(kv: Deno.Kv, policy: RateLimitPolicy, options: KvStoreOptions = {}) {
    if (policy.limit > KV_MAX_LIMIT) {
      throw new RangeError(`the KV store holds at most ${KV_MAX_LIMIT} requests per window`);
    }
    this.#kv = kv;
    this.#policy = policy;
    this.#prefix = options.prefix ?? ["rate_limit"];
    this.#maxAttempts = options.maxAttempts ?? 10;
    this.#ownsKv = options.ownsKv ?? false;
    this.#onStamp = options.onStamp;
    this.#clock = options.clock;
  }

  /** {@inheritDoc RateLimitStore.hit} */
  hit(key: string, now: number): Promise<Decision> {
    if (this.#clock !== undefined) now = this.#clock();
    return new Promise((resolve, reject) => {
      const lane = this.#lanes.get(key);
      if (lane !== undefined) {
        lane.push({ now, resolve, reject });
        return;
      }
      const queue: Pending[] = [{ now, resolve, reject }];
      this.#lanes.set(key, queue);
      void this.#drain(key, queue);
    });
  }

  /** {@inheritDoc RateLimitStore.peek} */
  async peek(key: string, now: number): Promise<Decision> {
    if (this.#clock !== undefined) now = this.#clock();
    const entry = await this.#kv.get<Uint8Array>([...this.#prefix, key]);
    this.#roundTrips++;
    const log = live(decodeLog(entry.value), now - this.#policy.windowMs);
    return peekDecision(log.length, log[0], now, this.#policy);
  }

  /** The counters since the store was created. */
  stats(): KvStoreStats {
    return { roundTrips: this.#roundTrips, conflicts: this.#conflicts, contended: this.#contended };
  }

  /** {@inheritDoc RateLimitStore.close} */
  close(): void {
    if (this.#ownsKv) this.#kv.close();
  }

  /** Decides batches of `key`'s queued requests until none is left, then retires the lane. */
  async #drain(key: string, queue: Pending[]): Promise<void> {
    while (queue.length > 0) {
      const batch = queue.splice(0);
      try {
        const decisions = await this.#decide(key, batch.map((p) => p.now));
        batch.forEach((p, i) => p.resolve(decisions[i]!));
      } catch (error) {
        for (const p of batch) p.reject(error);
      }
    }
    this.#lanes.delete(key);
  }

  /** Decides requests of one caller, in order, with one read and at most one write per attempt. */
  async #decide(key: string, nows: number[]): Promise<Decision[]> {
    const kvKey = [...this.#prefix, key];
    const { limit, windowMs } = this.#policy;
    for (let attempt = 1;; attempt++) {
      const entry = await this.#kv.get<Uint8Array>(kvKey);
      this.#roundTrips++;
      let log = decodeLog(entry.value);
      if (log.length > 0) this.#onStamp?.(log[log.length - 1]!);
      let admitted = false;
      const decisions = nows.map((now) => {
        log = live(log, now - windowMs);
        const decision = decide(log.length, log[0], now, this.#policy);
        if (decision.allowed) {
          insertInOrder(log, now); // processes' clocks differ a little: `now` is not always the newest
          admitted = true;
        }
        return decision;
      });
      // A 429 is not counted: when nothing was admitted there is nothing to write.
      if (!admitted) return decisions;
      // Only reachable if the limit was lowered under a live database; keep the newest `limit`.
      if (log.length > limit) log = log.slice(log.length - limit);
      let committed: boolean;
      try {
        const result = await this.#kv.atomic()
          .check(entry)
          .set(kvKey, encodeLog(log), { expireIn: EXPIRY_WINDOWS * windowMs + EXPIRY_GRACE_MS })
          .commit();
        committed = result.ok;
      } catch (error) {
        // Another process holds SQLite's write lock: nothing was written, so it is a lost race too.
        if (!isBusy(error)) throw error;
        committed = false;
      }
      this.#roundTrips++;
      if (committed) return decisions;
      this.#conflicts++;
      if (attempt >= this.#maxAttempts) {
        // Refusing is the safe answer: only this caller, hammering hard enough to lose every race,
        // is affected, and the limit is never exceeded.
        this.#contended += nows.length;
        return decisions.map((d) => ({
          allowed: false,
          remaining: 0,
          resetSeconds: Math.max(1, d.resetSeconds),
        }));
      }
      // A little jitter so that processes that conflicted do not meet again in lockstep.
      await new Promise((resolve) => setTimeout(resolve, Math.random() * attempt));
    }
  }
}

/**
 * Opens the database at `path` (a local file, a remote KV URL, or, when omitted, Deno's default: the
 * platform's database on Deno Deploy) and builds a store that closes it with itself.
 */
export async function openKvStore(
  policy: RateLimitPolicy,
  options: KvStoreOptions & { path?: string | undefined } = {},
): Promise<KvStore> {
  const kv = await Deno.openKv(options.path);
  return new KvStore(kv, policy, { ...options, ownsKv: true });
}

/** Encodes an ascending log as little-endian float64s (the same bytes on every platform). */
export function encodeLog(log: readonly number[]): Uint8Array {
  const bytes = new Uint8Array(log.length * 8);
  const view = new DataView(bytes.buffer);
  log.forEach((t, i) => view.setFloat64(i * 8, t, true));
  return bytes;
}

/** Decodes {@linkcode encodeLog}'s bytes; anything else (a missing or foreign value) is an empty log. */
export function decodeLog(value: unknown): number[] {
  if (!(value instanceof Uint8Array) || value.length % 8 !== 0) return [];
  const view = new DataView(value.buffer, value.byteOffset, value.byteLength);
  const log = new Array<number>(value.length / 8);
  for (let i = 0; i < log.length; i++) log[i] = view.getFloat64(i * 8, true);
  return log;
}

/** Whether `error` is SQLite's "database is locked" (SQLITE_BUSY), raised when processes share a file. */
function isBusy(error: unknown): boolean {
  return error instanceof Error && /database is (locked|busy)/i.test(error.message);
}

function live(log: number[], cutoff: number): number[] {
  let expired = 0;
  while (expired < log.length && log[expired]! <= cutoff) expired++;
  return expired === 0 ? log : log.slice(expired);
}
