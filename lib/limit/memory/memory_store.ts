/**
 * The in-memory rate-limit store: one process, exact, bounded (the default store).
 *
 * @module
 */

import {
  decide,
  type Decision,
  peekDecision,
  type RateLimitPolicy,
  type RateLimitStore,
} from "../core/decision.ts";
import { CallerTable } from "./caller_table.ts";
import {
  add,
  countOf,
  keepNewest,
  liveAfter,
  oldestOf,
  type RunLog,
  TIME_FLOOR,
  trim,
  twoRequests,
} from "./run_length_log.ts";
import { type LogPool, MAX_POOLED } from "./log_pool.ts";
import { later, unref } from "../../timer.ts";

/** Options of {@linkcode MemoryStore}. */
export interface MemoryStoreOptions {
  /** The most callers tracked at once; at the cap the least recently added caller is forgotten. */
  maxCallers?: number;
  /** Clock for the background sweep; defaults to `clock`, else `Date.now`. */
  now?: () => number;
  /**
   * The decisions' clock (ms since the epoch): when set, `hit` and `peek` stamp by it and ignore the
   * time they are passed, and the sweep runs by it. The service passes `clock/steady_clock.ts`'s, which a
   * step of the wall clock does not move.
   */
  clock?: () => number;
  /** Run the background sweep every {@linkcode SWEEP_INTERVAL_MS} (default true; tests sweep by hand). */
  sweep?: boolean;
  /** Called once when the cap is first reached, and again only after the store has gone below it. */
  onCapacity?: (tracked: number) => void;
}

/** Counters of a {@linkcode MemoryStore}, for tests and operators. */
export interface MemoryStoreStats {
  /** Callers tracked now. */
  tracked: number;
  /** Callers forgotten because the cap was reached. */
  evicted: number;
}

/** What a {@linkcode MemoryStore} holds, in its own accounting (see {@linkcode MemoryStore.memory}). */
export interface MemoryStoreMemory {
  /** Timestamps held in pooled logs (callers with one request hold theirs in the table). */
  logged: number;
  /**
   * Bytes of the store's own typed arrays that hold data: the caller table's entries used so far,
   * its index, and the pooled logs' chunks. Heap objects (rare: keys that are not addresses, logs
   * above a limit of 256) are not counted.
   */
  bytes: number;
}

/**
 * How often the background sweep runs. Often and short rather than once a second and long: with a
 * one-second window every caller must be visited every half second, and 500,000 callers visited in
 * one pass held the event loop for tens of milliseconds.
 */
export const SWEEP_INTERVAL_MS = 100;
/**
 * How long after the store is created the sweep starts. Nothing can leave a window before then (a
 * window is at least a second), and a cold start's first responses are sent first: the interval's
 * `setInterval` loads Node's timers on first use (lib/README.md, "Cold start").
 */
const FIRST_SWEEP_DELAY_MS = 1000;
/** Each caller is visited about this many times per window, so that none outlives it by much. */
const VISITS_PER_WINDOW = 2;
/** The fewest entries one sweep pass visits. */
const MIN_SWEEP_BUDGET = 100;
/** The default cap on tracked callers (`RATE_LIMIT_MAX_CALLERS`). */
export const DEFAULT_MAX_CALLERS = 500_000;

/** How a caller's log is held: one time in the table (one request in the window), ... */
const SINGLE = 0;
/** ... a ring in the table's log pool (a limit of at most 256), ... */
const POOLED = 1;
/** ... or a heap run log (above a limit of 256). */
const RUN = 2;
/** One of {@linkcode SINGLE}, {@linkcode POOLED}, {@linkcode RUN}. */
type LogForm = typeof SINGLE | typeof POOLED | typeof RUN;

/** A peek's answer for a caller with nothing in the window. */
const NOTHING_LIVE: { readonly count: number; readonly oldest: number } = { count: 0, oldest: 0 };

/**
 * The in-memory store: one process, exact, bounded.
 *
 * Callers live in a {@linkcode CallerTable}: open addressing over typed arrays sized once from the
 * cap, so that no call ever waits for a table to be rebuilt, and a caller with one request in the
 * window (the common case) is an IPv4 address or IPv6 /64 as integers and one float64 time, with
 * no heap object of its own. A caller with more requests keeps its times in a ring of the table's
 * {@linkcode LogPool} (shared typed-array chunks) at a limit of at most 256, and above that in a
 * {@linkcode RunLog} (one timestamp per distinct time, a count only beside a repeated one), whose
 * length is bounded by the distinct times in the window, not by the limit. Either is kept
 * ascending (a request from a clock that stepped back is inserted in order). `#formOf` tells which
 * of the three holds a caller, and each operation has one method per form. Times are absolute
 * milliseconds: there is no base time to move.
 *
 * A sweep every {@linkcode SWEEP_INTERVAL_MS} visits part of the table, so that every entry is
 * visited about twice per window, and forgets callers with nothing left in the window. At the cap
 * the caller added longest ago is forgotten (least recently added: a caller keeps its place while
 * it stays tracked, whatever it sends; one forgotten by the sweep or the cap starts again at the
 * end). That order needs no work per request, unlike least recently used, and a flood of new
 * addresses can only push out callers older than itself.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const store = new MemoryStore({ limit: 60, windowMs: 60_000 });
 * assert.deepEqual(store.hit("192.0.2.1", Date.now()), { allowed: true, remaining: 59, resetSeconds: 60 });
 * store.close();
 * ```
 */
export class MemoryStore implements RateLimitStore {
  readonly #policy: RateLimitPolicy;
  readonly #now: () => number;
  readonly #clock: (() => number) | undefined;
  readonly #onCapacity: ((tracked: number) => void) | undefined;
  readonly #table: CallerTable;
  /**
   * The decision on a caller with nothing in the window, the same at any time: made once and
   * shared, so that a caller's first request allocates no decision (decisions are never changed
   * once made).
   */
  readonly #first: Decision;
  /** The next entry the sweep visits. */
  #cursor = 0;
  #timer: ReturnType<typeof setInterval> | undefined;
  /** Cancels the wait before the first sweep (see the constructor). */
  #cancelStart: (() => void) | undefined;
  #evicted = 0;
  #atCapacity = false;
  /**
   * Whether logs are pooled: when every log fits the largest ring (a limit of at most 256). Above
   * that, a caller's log is a heap run log from its second request, as a log that outgrew the pool
   * would become anyway, and no chunk is mapped for it: a hot caller under a high limit went through
   * every ring size after each quiet second, and each chunk counts 33 MiB of V8's external memory,
   * which can draw V8 into a full collection.
   */
  readonly #pooled: boolean;

  /** Creates a store for `policy`. */
  constructor(policy: RateLimitPolicy, options: MemoryStoreOptions = {}) {
    this.#policy = policy;
    this.#first = decide(0, undefined, Date.now(), policy);
    this.#pooled = policy.limit <= MAX_POOLED;
    this.#table = new CallerTable(options.maxCallers ?? DEFAULT_MAX_CALLERS);
    this.#clock = options.clock;
    this.#now = options.now ?? options.clock ?? Date.now;
    this.#onCapacity = options.onCapacity;
    // The wait before the interval uses a timer that loads nothing; it keeps the process alive
    // until then (or until close()), the interval itself never does.
    if (options.sweep ?? true) {
      this.#cancelStart = later(FIRST_SWEEP_DELAY_MS, () => this.#startSweep());
    }
  }

  #startSweep(): void {
    this.#cancelStart = undefined;
    const timer = setInterval(() => this.sweep(this.#now()), SWEEP_INTERVAL_MS);
    // The sweep must never keep a process (or a test) alive.
    unref(timer);
    this.#timer = timer;
  }

  /** {@inheritDoc RateLimitStore.hit} */
  hit(key: string, now: number): Decision {
    if (this.#clock !== undefined) now = this.#clock();
    checkTime(now);
    const policy = this.#policy;
    const cutoff = now - policy.windowMs;
    const table = this.#table;
    const id = table.find(key);
    if (id < 0) {
      if (table.size >= table.capacity) {
        this.#evictOldest();
      }
      table.add(now);
      return this.#first;
    }
    switch (this.#formOf(id)) {
      case SINGLE:
        return this.#hitSingle(id, now, cutoff);
      case POOLED:
        return this.#hitPooled(id, now, cutoff);
      case RUN:
        return this.#hitRun(id, table.logOf(id)!, now, cutoff);
    }
  }

  /**
   * Counts a hit that another instance admitted at `t` (`local-first`: the shared hit log), whatever
   * this store would have decided: it is not a request here. Inserted in order, as a request from a
   * clock that stepped back is; a caller's log then keeps its newest `limit` times, which decide
   * every later request exactly as the whole log would (the caller is refused while `limit` of them
   * are in the window, and until the oldest of those leaves it). A time already out of the window of
   * the caller's newest is ignored. A new caller is added as by a hit, under the same cap.
   */
  record(key: string, t: number): void {
    checkTime(t);
    const table = this.#table;
    const id = table.find(key);
    if (id < 0) {
      if (table.size >= table.capacity) this.#evictOldest();
      table.add(t);
      return;
    }
    const newest = table.time[id]!;
    const cutoff = Math.max(t, newest) - this.#policy.windowMs;
    if (t <= cutoff) return;
    switch (this.#formOf(id)) {
      case SINGLE:
        this.#recordSingle(id, t, cutoff);
        break;
      case POOLED:
        this.#recordPooled(id, t, cutoff);
        break;
      case RUN:
        this.#recordRun(id, table.logOf(id)!, t, cutoff);
        break;
    }
    if (t > newest) table.time[id] = t;
  }

  /** {@inheritDoc RateLimitStore.peek} */
  peek(key: string, now: number): Decision {
    if (this.#clock !== undefined) now = this.#clock();
    checkTime(now);
    const cutoff = now - this.#policy.windowMs;
    const table = this.#table;
    const id = table.find(key);
    const { count, oldest } = id < 0 ? NOTHING_LIVE : this.#liveAfter(id, cutoff);
    return peekDecision(count, oldest, now, this.#policy);
  }

  /**
   * Forgets callers with nothing left in the window, visiting at most `budget` entries from where
   * the last sweep stopped. Called every {@linkcode SWEEP_INTERVAL_MS} by the store itself; exposed
   * for tests.
   */
  sweep(now: number, budget: number = this.#sweepBudget()): void {
    checkTime(now);
    const cutoff = now - this.#policy.windowMs;
    const table = this.#table;
    const time = table.time;
    let cursor = this.#cursor;
    for (let left = budget; left > 0; left--) {
      if (cursor >= table.top) {
        cursor = 0;
        if (table.top === 0) break;
      }
      // An entry's time is its newest counted one: at or before the cutoff, nothing is left.
      if (table.has(cursor) && time[cursor]! <= cutoff) table.remove(cursor);
      cursor++;
    }
    this.#cursor = cursor;
    table.logs.release();
    if (this.#atCapacity && table.size < table.capacity) this.#atCapacity = false;
  }

  /** The number of tracked and evicted callers. */
  stats(): MemoryStoreStats {
    return { tracked: this.#table.size, evicted: this.#evicted };
  }

  /**
   * The timestamps in pooled logs and the bytes of the typed arrays that hold the store's data:
   * what the memory formula of lib/limit/README.md counts, so that a test can pin it.
   */
  memory(): MemoryStoreMemory {
    const table = this.#table;
    const logs = table.logs.stats();
    return { logged: logs.timestamps, bytes: table.bytes + logs.bytes };
  }

  /** {@inheritDoc RateLimitStore.close} */
  close(): void {
    this.#cancelStart?.();
    this.#cancelStart = undefined;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /**
   * How caller `id`'s log is held, the one branch point of {@linkcode MemoryStore.hit},
   * {@linkcode MemoryStore.record} and {@linkcode MemoryStore.peek}: each has one method per form.
   */
  #formOf(id: number): LogForm {
    if (this.#table.logs.count(id) > 0) return POOLED;
    return this.#table.logOf(id) === undefined ? SINGLE : RUN;
  }

  /** {@linkcode MemoryStore.hit} for a caller held by one time in the table. */
  #hitSingle(id: number, now: number, cutoff: number): Decision {
    const table = this.#table;
    const single = table.time[id]!;
    if (single <= cutoff) {
      table.time[id] = now;
      return this.#first;
    }
    const decision = decide(1, single, now, this.#policy);
    if (decision.allowed) {
      this.#startLog(id, single, now);
      if (now > single) table.time[id] = now;
    }
    return decision;
  }

  /** A caller's second time in the window: a pooled log, or a run log above a limit of 256. */
  #startLog(id: number, first: number, second: number): void {
    if (this.#pooled) this.#table.logs.start(id, first, second);
    else this.#table.setLog(id, twoRequests(first, second));
  }

  /** {@linkcode MemoryStore.hit} for a caller with a pooled log. */
  #hitPooled(id: number, now: number, cutoff: number): Decision {
    const policy = this.#policy;
    const table = this.#table;
    const logs = table.logs;
    const count = logs.trim(id, cutoff);
    const decision = decide(count, count > 0 ? logs.oldest(id) : undefined, now, policy);
    if (decision.allowed) {
      if (count > 0 && !logs.push(id, now)) table.setLog(id, runLogOf(logs, id, now));
      if (now > table.time[id]! || count === 0) table.time[id] = now;
    } else if (count > policy.limit) {
      // Only reachable if the limit was lowered under a live store; keep the newest `limit`.
      logs.dropOldest(id, count - policy.limit);
    }
    return decision;
  }

  /** {@linkcode MemoryStore.hit} for a caller with a heap run log. */
  #hitRun(id: number, log: RunLog, now: number, cutoff: number): Decision {
    const policy = this.#policy;
    const table = this.#table;
    trim(log, cutoff);
    const count = countOf(log);
    const decision = decide(count, oldestOf(log), now, policy);
    if (decision.allowed) {
      if (count === 0) {
        table.setLog(id, undefined);
        table.time[id] = now;
      } else {
        add(log, now);
        if (now > table.time[id]!) table.time[id] = now;
      }
    } else if (count > policy.limit) {
      // Only reachable if the limit was lowered under a live store; keep the newest `limit`.
      keepNewest(log, policy.limit);
    }
    return decision;
  }

  /** {@linkcode MemoryStore.record} for a caller held by one time in the table. */
  #recordSingle(id: number, t: number, cutoff: number): void {
    const newest = this.#table.time[id]!;
    if (newest <= cutoff) this.#table.time[id] = t;
    else if (this.#policy.limit > 1) this.#startLog(id, newest, t);
  }

  /** {@linkcode MemoryStore.record} for a caller with a pooled log. */
  #recordPooled(id: number, t: number, cutoff: number): void {
    const limit = this.#policy.limit;
    const table = this.#table;
    const logs = table.logs;
    const count = logs.trim(id, cutoff);
    if (count === 0) {
      table.time[id] = t;
      return;
    }
    if (count >= limit) {
      if (t <= logs.oldest(id)) return;
      logs.dropOldest(id, count - limit + 1);
    }
    if (!logs.push(id, t)) table.setLog(id, runLogOf(logs, id, t));
  }

  /** {@linkcode MemoryStore.record} for a caller with a heap run log. */
  #recordRun(id: number, log: RunLog, t: number, cutoff: number): void {
    trim(log, cutoff);
    if (countOf(log) === 0) {
      this.#table.setLog(id, undefined);
      this.#table.time[id] = t;
      return;
    }
    add(log, t);
    if (countOf(log) > this.#policy.limit) keepNewest(log, this.#policy.limit);
  }

  /** {@linkcode MemoryStore.peek}'s count and oldest time of caller `id` after `cutoff`. */
  #liveAfter(id: number, cutoff: number): { count: number; oldest: number } {
    const table = this.#table;
    switch (this.#formOf(id)) {
      case SINGLE:
        return table.time[id]! > cutoff ? { count: 1, oldest: table.time[id]! } : NOTHING_LIVE;
      case POOLED:
        return table.logs.liveAfter(id, cutoff);
      case RUN:
        return liveAfter(table.logOf(id)!, cutoff);
    }
  }

  /**
   * Forgets the caller added longest ago: bounded memory matters more than one caller's count.
   * Reports the cap once per incident.
   */
  #evictOldest(): void {
    const table = this.#table;
    if (!this.#atCapacity) {
      this.#atCapacity = true;
      this.#onCapacity?.(table.size);
    }
    table.remove(table.oldest());
    this.#evicted++;
  }

  #sweepBudget(): number {
    const passes = Math.max(1, this.#policy.windowMs / SWEEP_INTERVAL_MS);
    const top = this.#table.top;
    return Math.max(MIN_SWEEP_BUDGET, Math.ceil((top / passes) * VISITS_PER_WINDOW));
  }
}

/**
 * Moves entry `id`'s pooled log, full, to a heap run log with one more request at `t` (only above
 * a limit of 256).
 */
function runLogOf(logs: LogPool, id: number, t: number): RunLog {
  const times = logs.times(id);
  logs.clear(id);
  const log = twoRequests(times[0]!, times[1]!);
  for (let i = 2; i < times.length; i++) add(log, times[i]!);
  add(log, t);
  return log;
}

/**
 * Refuses a time the store cannot hold: not finite (one NaN would spoil a caller's log for good),
 * or at or below {@linkcode TIME_FLOOR} (it would read as a run log's count cell).
 */
function checkTime(now: number): void {
  if (!(Number.isFinite(now) && now > TIME_FLOOR)) {
    throw new RangeError(`rate-limit time must be finite and above ${TIME_FLOOR}, got ${now}`);
  }
}
