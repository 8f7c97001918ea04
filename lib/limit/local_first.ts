/**
 * The `local-first` consistency of a shared rate-limit store: every request is decided here, at
 * once, and the store only carries the hits between instances.
 *
 * Each instance keeps every caller of the deployment in its own {@linkcode MemoryStore} (pooled,
 * bounded by `RATE_LIMIT_MAX_CALLERS`, with the memory store's cap and formula) and decides there.
 * The hits it admits are packed into batches (`hit_codec.ts`) and, at most one exchange in flight,
 * started at most every `syncMs`, sent to the shared hit log (`hit_log.ts`: a Redis stream, a Deno KV
 * prefix) by one exchange that brings back, in the same round trip, the batches the other instances
 * appended since. Their hits are recorded in the memory store at their own times
 * ({@linkcode MemoryStore.record}). A process that starts reads the last window before it serves
 * (its first exchange), and a stopping one flushes its batches (`close()`): restarts and one-port
 * handovers keep the count, and no request ever waits for the store.
 *
 * The bound: a hit of another instance reaches this one at most `D = 2·max(syncMs, rtt) + rtt`
 * after it is admitted (it waits for that instance's next exchange to start, travels to the store,
 * and this instance's next exchange starts and comes back), while the backlog is under one sync's
 * worth of batches ({@linkcode MAX_EXCHANGES_PER_SYNC}). The last request a window admits at an
 * instance saw every other instance's hit except those of the last `D`, so in any window one caller
 * is admitted at most `limit + u`, where `u` is the number of its requests the other instances
 * admitted in a span of `D`: at most `⌈r'·D⌉` for a rate `r'` at the other instances, and never more
 * than `(N-1)·limit`. {@linkcode overshootBound} computes it; `tests/limit/local_first_test.ts`
 * checks it against a model with fast-check, with instances restarted mid-run.
 *
 * The backlog (hits admitted here and not yet in the store) is bounded by `maxBacklogBytes`
 * (default {@linkcode MAX_BACKLOG_BYTES}: about 1.4 million IPv4 hits). When the store is down or
 * slower than the hits arrive, the backlog grows to that bound and is sent once the store answers
 * again; past it, hits are decided and counted here but not sent (counted in `droppedHits`), and the
 * store reports it once per episode (`overflowing`, then `caught-up`).
 *
 * @module
 */

import type { Decision, RateLimitPolicy, RateLimitStore } from "./decision.ts";
import { decodeHits, HitWriter } from "./hit_codec.ts";
import type { HitLog, LogBatch } from "./hit_log.ts";
import { MemoryStore, type MemoryStoreMemory } from "./memory.ts";
import { unref } from "../timer.ts";

/** The reports of a sync outage or overflow; limiting goes on by the local store meanwhile. */
export type SyncIncident =
  | {
    /** An exchange failed: this instance decides from what it knows until one succeeds. */
    kind: "unsynced";
    /** The first error, as `Name: message`. */
    error: string;
  }
  | {
    /** An exchange succeeded again; the hits admitted meanwhile are being sent. */
    kind: "resynced";
    /** How long exchanges failed, in ms. */
    downMs: number;
    /** Exchanges that failed. */
    failedSyncs: number;
  }
  | {
    /** The backlog reached its bound: hits admitted here are no longer sent to the store. */
    kind: "overflowing";
    /** Why, in one sentence. */
    cause: string;
    /** The bound, in bytes. */
    backlogBytes: number;
  }
  | {
    /** The backlog is back under half its bound: hits are sent again. */
    kind: "caught-up";
    /** Hits not sent during the episode. */
    droppedHits: number;
  };

/** Options of {@linkcode LocalFirstStore}. */
export interface LocalFirstOptions {
  /** The shortest time between the starts of two syncs, in ms. */
  syncMs: number;
  /** The longest an exchange may take before it counts as failed, in ms. */
  syncTimeoutMs: number;
  /** The most callers tracked at once (the memory store's cap). */
  maxCallers?: number;
  /** Clock of the decisions' bookkeeping and the sync loop (default `Date.now`). */
  clock?: () => number;
  /** Run the sync loop and the memory store's sweep on timers (default true; tests call `sync`). */
  autoSync?: boolean;
  /** Receives the start and the end of every sync outage and backlog overflow. */
  onIncident?: (incident: SyncIncident) => void;
  /** This instance's id in the log (default: random). */
  instance?: string;
  /**
   * The most bytes of hits waiting to be sent (default {@linkcode MAX_BACKLOG_BYTES}), plus the one hit
   * that crosses it.
   */
  maxBacklogBytes?: number;
  /** Sees the newest time of every batch received (Deno KV: another instance's clock ahead). */
  onStamp?: (newest: number) => void;
  /** Called when the memory store first reaches its cap, and again only after it went below. */
  onCapacity?: (tracked: number) => void;
}

/** Counters of a {@linkcode LocalFirstStore}. */
export interface LocalFirstStats {
  /** Decisions taken (hits and peeks). */
  decisions: number;
  /** Syncs that succeeded (each one or more exchanges). */
  syncs: number;
  /** Exchanges that failed or timed out. */
  failedSyncs: number;
  /** Round trips the log sent. */
  roundTrips: number;
  /** Callers tracked now (the memory store's). */
  tracked: number;
  /** Callers forgotten at the cap. */
  evicted: number;
  /** Hits admitted here and sent to the log. */
  sentHits: number;
  /** Hits of other instances recorded here. */
  receivedHits: number;
  /** Hits admitted here and never sent: the backlog was full. */
  droppedHits: number;
  /** Bytes of hits waiting to be sent now. */
  backlogBytes: number;
  /** Batches received that could not be read (another format), dropped whole. */
  unreadBatches: number;
}

/**
 * The most bytes of unsent hits by default: 8 MiB, about 1.4 million IPv4 hits or 840,000 IPv6 /64
 * ones, a minute of the fastest spray measured here; past it hits are not sent (see the module).
 */
export const MAX_BACKLOG_BYTES = 8 * 1024 * 1024;

/**
 * The most exchanges one sync sends back to back while full batches wait: a spray fills a batch of
 * 64 KiB (Deno KV's) in well under a sync period, and one batch per period would fall behind.
 */
export const MAX_EXCHANGES_PER_SYNC = 8;

/** What {@linkcode overshootBound} needs to know. */
export interface OvershootInput {
  /** The limit per window. */
  limit: number;
  /** The caller's requests per second, over every instance. */
  ratePerSecond: number;
  /** Instances the caller's requests are spread over, evenly (a round-robin load balancer). */
  instances: number;
  /** `RATE_LIMIT_SYNC_MS`. */
  syncMs: number;
  /** The store's round-trip time, in ms. */
  rttMs: number;
}

/**
 * The most requests of one caller a window can admit across instances in `local-first`, above the
 * limit: `min((N-1)·limit, ⌈r·(N-1)/N·D⌉)` with `D = 2·max(syncMs, rtt) + rtt`, the longest a hit
 * of one instance takes to reach the others. `r·(N-1)/N` is the caller's rate at the instances
 * other than the one deciding; with an uneven spread use `r` itself (pass `instances: Infinity`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * // 50 requests/s over two instances, syncs every 50 ms, a store 80 ms away: 25/s · 0.24 s = 6.
 * assert.equal(
 *   overshootBound({ limit: 60, ratePerSecond: 50, instances: 2, syncMs: 50, rttMs: 80 }),
 *   6,
 * );
 * ```
 */
export function overshootBound(input: OvershootInput): number {
  const { limit, ratePerSecond, instances, syncMs, rttMs } = input;
  if (instances <= 1) return 0;
  const staleMs = 2 * Math.max(syncMs, rttMs) + rttMs;
  const share = Number.isFinite(instances) ? (instances - 1) / instances : 1;
  const unseen = Math.ceil((ratePerSecond * share * staleMs) / 1000 - 1e-9);
  return Number.isFinite(instances) ? Math.min((instances - 1) * limit, unseen) : unseen;
}

/**
 * A store that decides in its own memory store and shares the admitted hits through a
 * {@linkcode HitLog}.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import type { HitLog, LogBatch } from "./hit_log.ts";
 * // A log shared by two instances in one process.
 * const batches: LogBatch[] = [];
 * const logOf = (): HitLog => {
 *   let read = 0;
 *   return {
 *     maxBatchBytes: 65536,
 *     roundTrips: 0,
 *     exchange(mine) {
 *       const news = batches.slice(read);
 *       if (mine !== null) batches.push(mine);
 *       read = batches.length;
 *       return Promise.resolve(news);
 *     },
 *     close() {},
 *   };
 * };
 * const policy = { limit: 2, windowMs: 60_000 };
 * const options = { syncMs: 50, syncTimeoutMs: 1000, autoSync: false };
 * const a = new LocalFirstStore(logOf(), policy, options);
 * const b = new LocalFirstStore(logOf(), policy, options);
 * assert.equal(a.hit("192.0.2.1", Date.now()).allowed, true);
 * assert.equal(b.hit("192.0.2.1", Date.now()).allowed, true);
 * // a sends its hit; b sends its own and reads a's: the caller's limit of 2 is spent at b.
 * await a.sync();
 * await b.sync();
 * assert.equal(b.hit("192.0.2.1", Date.now()).allowed, false);
 * await a.close();
 * await b.close();
 * ```
 */
export class LocalFirstStore implements RateLimitStore {
  readonly #log: HitLog;
  readonly #policy: RateLimitPolicy;
  readonly #options: LocalFirstOptions;
  readonly #clock: () => number;
  readonly #instance: string;
  readonly #memory: MemoryStore;
  readonly #maxBacklog: number;
  /** The batch being filled. */
  readonly #writer: HitWriter;
  /** Batches sealed and not yet acknowledged, oldest first, with the hits each holds. */
  readonly #sealed: Array<{ batch: LogBatch; count: number }> = [];
  #sealedBytes = 0;
  #seq = 0;
  #inFlight: Promise<void> | undefined;
  /** An exchange that timed out and has not settled yet (see `#exchange`). */
  #unsettled = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  #closing: Promise<void> | undefined;
  #down: { since: number; failed: number } | undefined;
  #overflow: { dropped: number } | undefined;
  #stats = {
    decisions: 0,
    syncs: 0,
    failedSyncs: 0,
    sentHits: 0,
    receivedHits: 0,
    droppedHits: 0,
    unreadBatches: 0,
  };

  /** Creates the store over `log` and starts the sync loop. */
  constructor(log: HitLog, policy: RateLimitPolicy, options: LocalFirstOptions) {
    this.#log = log;
    this.#policy = policy;
    this.#options = options;
    this.#clock = options.clock ?? Date.now;
    this.#instance = options.instance ?? crypto.randomUUID().slice(0, 8);
    this.#maxBacklog = options.maxBacklogBytes ?? MAX_BACKLOG_BYTES;
    this.#writer = new HitWriter(log.maxBatchBytes);
    const auto = options.autoSync ?? true;
    this.#memory = new MemoryStore(policy, {
      sweep: auto,
      now: this.#clock,
      ...(options.maxCallers === undefined ? {} : { maxCallers: options.maxCallers }),
      ...(options.onCapacity === undefined ? {} : { onCapacity: options.onCapacity }),
    });
    if (auto) this.#schedule(options.syncMs);
  }

  /** {@inheritDoc RateLimitStore.hit} Answered at once, from this instance's memory store. */
  hit(key: string, now: number): Decision {
    this.#stats.decisions++;
    const decision = this.#memory.hit(key, now);
    if (decision.allowed) this.#append(key, now);
    return decision;
  }

  /** {@inheritDoc RateLimitStore.peek} */
  peek(key: string, now: number): Decision {
    this.#stats.decisions++;
    return this.#memory.peek(key, now);
  }

  /**
   * Sends what waits (unless an exchange is in flight: then waits for it) and records what the
   * others appended. Called by the loop every `syncMs`, and once before the service listens (the
   * first exchange reads the last window); exposed for tests.
   */
  sync(): Promise<void> {
    this.#inFlight ??= this.#syncOnce().finally(() => {
      this.#inFlight = undefined;
    });
    return this.#inFlight;
  }

  /** The counters since the store was created. */
  stats(): LocalFirstStats {
    const memory = this.#memory.stats();
    return {
      ...this.#stats,
      roundTrips: this.#log.roundTrips,
      tracked: memory.tracked,
      evicted: memory.evicted,
      backlogBytes: this.#sealedBytes + this.#writer.length,
    };
  }

  /** What the memory store holds, in its own accounting (the formula of lib/limit/README.md). */
  memory(): MemoryStoreMemory {
    return this.#memory.memory();
  }

  /** Batches (sealed or being filled) not yet acknowledged by the log. */
  get backlog(): number {
    return this.#sealed.length + (this.#writer.count > 0 ? 1 : 0);
  }

  /** Whether the last exchange succeeded. */
  get synced(): boolean {
    return this.#down === undefined;
  }

  /**
   * Stops the loop and flushes: waits for the exchange in flight, then sends every batch left (until
   * an exchange fails or `syncTimeoutMs` has passed), then closes the log. A stopping instance
   * (SIGTERM) calls it, so the process that replaces it reads its hits at its next exchange.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    const deadline = this.#clock() + this.#options.syncTimeoutMs;
    for (let round = 0; round < 1000; round++) {
      await this.sync().catch(() => {});
      if (this.backlog === 0 || !this.synced || this.#clock() > deadline) break;
    }
    this.#memory.close();
    await this.#log.close();
  }

  /** Packs an admitted hit into the batch being filled, within the backlog's bound. */
  #append(key: string, now: number): void {
    const writer = this.#writer;
    if (this.#overflow !== undefined || this.#sealedBytes + writer.length >= this.#maxBacklog) {
      this.#overflowing();
      return;
    }
    if (writer.append(key, now)) return;
    if (writer.count === 0) return; // a key no batch takes (longer than any caller's)
    this.#seal();
    writer.append(key, now);
  }

  #seal(): void {
    const count = this.#writer.count;
    const hits = this.#writer.take();
    this.#sealed.push({ batch: { instance: this.#instance, seq: this.#seq++, hits }, count });
    this.#sealedBytes += hits.length;
  }

  #overflowing(): void {
    if (this.#overflow === undefined) {
      this.#overflow = { dropped: 0 };
      this.#options.onIncident?.({
        kind: "overflowing",
        cause: this.#down === undefined
          ? "the rate-limit store takes hits slower than this instance admits them"
          : "the rate-limit store is unreachable",
        backlogBytes: this.#maxBacklog,
      });
    }
    this.#overflow.dropped++;
    this.#stats.droppedHits++;
  }

  #schedule(delayMs: number): void {
    if (this.#closed) return;
    this.#timer = setTimeout(() => {
      const started = this.#clock();
      this.sync().finally(() => {
        // At most one exchange in flight, and syncs start at least `syncMs` apart.
        this.#schedule(Math.max(0, this.#options.syncMs - (this.#clock() - started)));
      });
    }, delayMs);
    // The loop must never keep a process (or a test) alive.
    unref(this.#timer);
  }

  /** One sync: up to {@linkcode MAX_EXCHANGES_PER_SYNC} exchanges while sealed batches wait. */
  async #syncOnce(): Promise<void> {
    // Every hit admitted until now goes with this sync; those admitted meanwhile, with the next.
    if (this.#writer.count > 0) this.#seal();
    for (let i = 0; i < MAX_EXCHANGES_PER_SYNC; i++) {
      const head = this.#sealed[0];
      const now = this.#clock();
      let reply: LogBatch[];
      try {
        reply = await this.#exchange(head?.batch ?? null);
      } catch (error) {
        this.#failed(now, error);
        return;
      }
      if (head !== undefined) {
        this.#sealed.shift();
        this.#sealedBytes -= head.batch.hits.length;
        this.#stats.sentHits += head.count;
      }
      this.#receive(reply);
      this.#succeeded(now, i === 0);
      if (this.#sealed.length === 0) break;
    }
    if (
      this.#overflow !== undefined &&
      this.#sealedBytes + this.#writer.length < this.#maxBacklog / 2
    ) {
      const dropped = this.#overflow.dropped;
      this.#overflow = undefined;
      this.#options.onIncident?.({ kind: "caught-up", droppedHits: dropped });
    }
  }

  /**
   * One exchange, bounded by `syncTimeoutMs`. One that timed out may still land: its reply is then
   * recorded when it comes (the log's cursor has moved past those batches) and its batch is sent
   * again with the same number (a log keeps it once). Until it has settled no other exchange starts
   * (a sync meanwhile fails at once): two exchanges of one log are never in flight together. An
   * exchange sent down a connection that died silently settles when the Redis client replaces that
   * connection (`redis_client.ts`, `SILENT_CONNECTION_MS`).
   */
  async #exchange(mine: LogBatch | null): Promise<LogBatch[]> {
    if (this.#unsettled) throw new SyncTimeoutError(this.#options.syncTimeoutMs);
    let settled = false;
    let late = false;
    const call = this.#log.exchange(mine);
    // Registered before the bound's: runs first when the call settles in time.
    call.then((reply) => {
      settled = true;
      if (!late) return;
      this.#unsettled = false;
      this.#receive(reply);
    }, () => {
      settled = true;
      if (late) this.#unsettled = false;
    });
    try {
      return await bounded(call, this.#options.syncTimeoutMs);
    } catch (error) {
      if (!settled) {
        late = true;
        this.#unsettled = true;
      }
      throw error;
    }
  }

  /** Records the others' hits still in the window at their own times. */
  #receive(batches: LogBatch[]): void {
    const cutoff = this.#clock() - this.#policy.windowMs;
    const memory = this.#memory;
    for (const batch of batches) {
      if (batch.instance === this.#instance) continue;
      let newest = -Infinity;
      try {
        decodeHits(batch.hits, (key, t) => {
          if (t > newest) newest = t;
          if (t <= cutoff) return;
          memory.record(key, t);
          this.#stats.receivedHits++;
        });
      } catch {
        this.#stats.unreadBatches++;
      }
      if (newest > -Infinity) this.#options.onStamp?.(newest);
    }
  }

  #failed(now: number, error: unknown): void {
    this.#stats.failedSyncs++;
    if (this.#down !== undefined) {
      this.#down.failed++;
      return;
    }
    this.#down = { since: now, failed: 1 };
    this.#options.onIncident?.({
      kind: "unsynced",
      error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
    });
  }

  #succeeded(now: number, first: boolean): void {
    if (first) this.#stats.syncs++;
    const down = this.#down;
    if (down === undefined) return;
    this.#down = undefined;
    this.#options.onIncident?.({
      kind: "resynced",
      downMs: now - down.since,
      failedSyncs: down.failed,
    });
  }
}

/** Raised when an exchange outlives its bound. */
export class SyncTimeoutError extends Error {
  /** Creates the error for a bound of `timeoutMs`. */
  constructor(timeoutMs: number) {
    super(`rate-limit sync did not answer within ${timeoutMs} ms`);
    this.name = "SyncTimeoutError";
  }
}

/** The longest delay `setTimeout` keeps (a longer one fires at once); longer bounds are none. */
const MAX_TIMER_MS = 2 ** 31 - 1;

function bounded<T>(result: Promise<T>, timeoutMs: number): Promise<T> {
  if (timeoutMs >= MAX_TIMER_MS) return result;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new SyncTimeoutError(timeoutMs)), timeoutMs);
  });
  return Promise.race([result, timeout]).finally(() => clearTimeout(timer));
}
