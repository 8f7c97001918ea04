/**
 * The `local-first` consistency of a shared rate-limit store: every request is decided here, at
 * once, and the store only carries the hits between instances.
 *
 * Each instance keeps every caller of the deployment in its own {@linkcode MemoryStore} (pooled,
 * bounded by `RATE_LIMIT_MAX_CALLERS`, with the memory store's cap and formula) and decides there.
 * The hits it admits are packed into batches (`hit_codec.ts`) and, at most one exchange in flight,
 * started at most every `syncMs`, sent to the shared hit log (`core/hit_log.ts`: a Redis stream, a Deno KV
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
 * than `(N-1)·limit`. {@linkcode overshootBound} computes it; `tests/limit/local_first/local_first_store_test.ts`
 * checks it against a model with fast-check, with instances restarted mid-run.
 *
 * The backlog (hits admitted here and not yet in the store) is bounded by `maxBacklogBytes`
 * (default {@linkcode MAX_BACKLOG_BYTES}: about 1.4 million IPv4 hits). When the store is down or
 * slower than the hits arrive, the backlog grows to that bound and is sent once the store answers
 * again; past it, hits are decided and counted here but not sent (counted in `droppedHits`), and the
 * store reports it once per episode (`overflowing`, then `caught-up`).
 *
 * What the log brings back is written by other processes, so it is not trusted (lib/limit/README.md,
 * "Who can write the log"): a hit stamped more than `futureToleranceMs` in this instance's future
 * is recorded at this instance's now and counted (`futureHits`), so no entry holds a caller's window
 * past one window (and the tolerance) from now; an entry or batch that cannot be read costs that
 * entry (`unreadBatches`), and the sync goes on; the peers' stamps tell whose clock is wrong
 * (`clock/peer_clocks.ts`). Each of these is reported once per episode.
 *
 * @module
 */

import type { Decision, RateLimitPolicy, RateLimitStore } from "../core/decision.ts";
import { decodeHits, HitWriter } from "./hit_codec.ts";
import type { HitLog, LogBatch } from "../core/hit_log.ts";
import { namedMessageOf } from "../../text/error_message.ts";
import { MemoryStore, type MemoryStoreMemory } from "../memory/memory_store.ts";
import { type ClockVerdict, PeerClocks } from "../clock/peer_clocks.ts";
import { raceTimer, unref } from "../../timer.ts";

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
  }
  | {
    /**
     * The log held what cannot be used: an entry or batch that cannot be read (skipped), hits
     * stamped in this instance's future (recorded at its now), or an entry that moved another
     * writer's numbers. Reported once per episode and cause; the sync goes on.
     */
    kind: "untrusted";
    /** `unreadable`, `future` or `tampered`. */
    cause: "unreadable" | "future" | "tampered";
    /** What was met, in one sentence. */
    detail: string;
  }
  | {
    /** A window passed with nothing of that cause: the episode is over. */
    kind: "trusted";
    /** The cause whose episode ended. */
    cause: "unreadable" | "future" | "tampered";
    /** How many entries (or hits, for `future`) the episode counted. */
    count: number;
  }
  | {
    /** The peers' stamps disagree with this instance's clock; the verdict says whose is wrong. */
    kind: "clock";
    /** The verdict (`clock/peer_clocks.ts`); `agree` ends the episode. */
    verdict: ClockVerdict;
  };

/** Options of {@linkcode LocalFirstStore}. */
export interface LocalFirstOptions {
  /** The shortest time between the starts of two syncs, in ms. */
  syncMs: number;
  /** The longest an exchange may take before it counts as failed, in ms. */
  syncTimeoutMs: number;
  /** The most callers tracked at once (the memory store's cap). */
  maxCallers?: number;
  /** Clock of the decisions' bookkeeping and of the hits' stamps (default `Date.now`). */
  clock?: () => number;
  /**
   * The clock the sync loop and the flush at close are timed by (default `performance.now`): never
   * the one hits are stamped by, which a store's step moves (a step back of a day would have held
   * the next sync for a day).
   */
  monotonic?: () => number;
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
  /**
   * A hit of another instance stamped more than this far in this instance's future (ms) is recorded
   * at this instance's now (default {@linkcode FUTURE_TOLERANCE_MS}).
   */
  futureToleranceMs?: number;
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
  /**
   * Entries or batches received that could not be read (another format, cut short, not base64),
   * skipped: the log's and this store's together.
   */
  unreadBatches: number;
  /** Hits of other instances stamped beyond the tolerance in this instance's future: clamped. */
  futureHits: number;
  /** Signs that an entry moved a writer's numbers (`LogHealth.tampered`). */
  tamperedEntries: number;
}

/**
 * How far in this instance's future a peer's hit may be stamped by default (ms): a second, the
 * clocks' warning threshold (`clock/store_clock.ts`, `WARN_OFFSET_MS`); instances on Redis stamp by the
 * store's clock, each within half its sample's round trip of it.
 */
export const FUTURE_TOLERANCE_MS = 1000;

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
 * import type { HitLog, LogBatch } from "../core/hit_log.ts";
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
  readonly #monotonic: () => number;
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
  readonly #futureToleranceMs: number;
  readonly #peerClocks: PeerClocks;
  /** The last clock verdict reported, as a key (`agree` when none). */
  #clockVerdict = "agree";
  /**
   * Until the first sync that read everything: the replay's batches are old by design, and a
   * stopped predecessor's would look like a clock behind.
   */
  #replaying = true;
  /** The open episodes of entries not trusted, by cause: how many, and when the last was met. */
  readonly #untrusted = new Map<Untrusted, { count: number; lastAt: number }>();
  /** The log's health counters already accounted for. */
  #logHealth = { unreadable: 0, tampered: 0 };
  #stats = {
    decisions: 0,
    syncs: 0,
    failedSyncs: 0,
    sentHits: 0,
    receivedHits: 0,
    droppedHits: 0,
    unreadBatches: 0,
    futureHits: 0,
    tamperedEntries: 0,
  };

  /** Creates the store over `log` and starts the sync loop. */
  constructor(log: HitLog, policy: RateLimitPolicy, options: LocalFirstOptions) {
    this.#log = log;
    this.#policy = policy;
    this.#options = options;
    this.#clock = options.clock ?? Date.now;
    this.#monotonic = options.monotonic ?? (() => performance.now());
    this.#instance = options.instance ?? crypto.randomUUID().slice(0, 8);
    this.#maxBacklog = options.maxBacklogBytes ?? MAX_BACKLOG_BYTES;
    this.#futureToleranceMs = options.futureToleranceMs ?? FUTURE_TOLERANCE_MS;
    // A working sync delivers a hit within D (a few syncs); a peer whose newest stamps lag by a
    // window (its hits count for nothing here) and more than a sync's timeout is behind, not slow.
    this.#peerClocks = new PeerClocks({
      toleranceMs: this.#futureToleranceMs,
      lagMs: Math.max(policy.windowMs, options.syncTimeoutMs + 2 * options.syncMs),
    });
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
    const deadline = this.#monotonic() + this.#options.syncTimeoutMs;
    for (let round = 0; round < 1000; round++) {
      await this.sync().catch(() => {});
      if (this.backlog === 0 || !this.synced || this.#monotonic() > deadline) break;
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
      const started = this.#monotonic();
      // A sync reports its own failures; whatever else escapes it must not end the process.
      this.sync().catch((error) => this.#failed(this.#clock(), error)).finally(() => {
        // At most one exchange in flight, and syncs start at least `syncMs` apart.
        const spent = this.#monotonic() - started;
        this.#schedule(Math.max(0, Math.min(this.#options.syncMs, this.#options.syncMs - spent)));
      });
    }, delayMs);
    // The loop must never keep a process (or a test) alive.
    unref(this.#timer);
  }

  /**
   * One sync: up to {@linkcode MAX_EXCHANGES_PER_SYNC} exchanges while sealed batches wait or the
   * log has more to read (a replay read one chunk at a time).
   */
  async #syncOnce(): Promise<void> {
    // Every hit admitted until now goes with this sync; those admitted meanwhile, with the next.
    if (this.#writer.count > 0) this.#seal();
    for (let i = 0; i < MAX_EXCHANGES_PER_SYNC; i++) {
      const head = this.#sealed[0];
      const now = this.#clock();
      try {
        const reply = await this.#exchange(head?.batch ?? null);
        if (!Array.isArray(reply)) throw new TypeError("the hit log answered something not a list");
        this.#receive(reply);
      } catch (error) {
        this.#failed(now, error);
        return;
      }
      if (head !== undefined) {
        this.#sealed.shift();
        this.#sealedBytes -= head.batch.hits.length;
        this.#stats.sentHits += head.count;
      }
      this.#succeeded(now, i === 0);
      if (this.#log.more !== true) this.#replaying = false;
      if (this.#sealed.length === 0 && this.#log.more !== true) break;
    }
    this.#checkTrust();
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
   * connection (`redis/redis_client.ts`, `SILENT_CONNECTION_MS`).
   */
  async #exchange(mine: LogBatch | null): Promise<LogBatch[]> {
    const timeoutMs = this.#options.syncTimeoutMs;
    if (this.#unsettled) throw new SyncTimeoutError(timeoutMs);
    const call = this.#log.exchange(mine);
    return await raceTimer(call, timeoutMs, () => {
      // The bound expired with the call unsettled: it is late from here, whatever it does next.
      this.#unsettled = true;
      call.then((reply) => {
        this.#unsettled = false;
        if (Array.isArray(reply)) this.#receive(reply);
      }, () => this.#unsettled = false);
      throw new SyncTimeoutError(timeoutMs);
    });
  }

  /**
   * Whether the last sync read everything that waited (false while a replay still has chunks to
   * read: a caller's count then lacks the hits not read yet).
   */
  get caughtUp(): boolean {
    return this.#log.more !== true;
  }

  /**
   * Records the others' hits still in the window at their own times, those stamped beyond the
   * tolerance in this instance's future at its now. A batch that cannot be read is counted and
   * skipped (the hits before the fault are kept: each was a well-formed hit); nothing here throws.
   */
  #receive(batches: readonly LogBatch[]): void {
    const now = this.#clock();
    const cutoff = now - this.#policy.windowMs;
    const horizon = now + this.#futureToleranceMs;
    const memory = this.#memory;
    let future = 0;
    let unread = 0;
    for (const batch of batches) {
      if (batch?.instance === this.#instance) continue;
      let newest = -Infinity;
      try {
        if (!(batch.hits instanceof Uint8Array) || batch.hits.length > this.#log.maxBatchBytes) {
          throw new RangeError("a batch larger than the log takes, or not bytes");
        }
        decodeHits(batch.hits, (key, t) => {
          if (t > newest) newest = t;
          if (t <= cutoff) return;
          if (t > horizon) {
            future++;
            t = now;
          }
          memory.record(key, t);
          this.#stats.receivedHits++;
        });
      } catch {
        unread++;
      }
      if (newest > -Infinity && !this.#replaying) {
        this.#peerClocks.observe(String(batch.instance), newest, now);
      }
    }
    this.#counted(future, unread);
  }

  /** Counts what `#receive` clamped and skipped, with the log's own, and judges the clocks. */
  #counted(future: number, unread: number): void {
    this.#stats.futureHits += future;
    this.#stats.unreadBatches += unread;
    if (future > 0) {
      this.#untrust(
        "future",
        future,
        `hits stamped more than ${this.#futureToleranceMs} ms in this instance's future: recorded at its now`,
      );
    }
    if (unread > 0) {
      this.#untrust(
        "unreadable",
        unread,
        "a batch that cannot be read (another format, cut short, a key or a time out of bounds)",
      );
    }
    this.#readLogHealth();
    this.#judgeClocks();
  }

  /** Takes what the log itself skipped since the last exchange into the counts and episodes. */
  #readLogHealth(): void {
    const health = this.#log.health;
    if (health === undefined) return;
    const unreadable = health.unreadable - this.#logHealth.unreadable;
    const tampered = health.tampered - this.#logHealth.tampered;
    this.#logHealth = { unreadable: health.unreadable, tampered: health.tampered };
    if (unreadable > 0) {
      this.#stats.unreadBatches += unreadable;
      this.#untrust("unreadable", unreadable, health.unreadableReason);
    }
    if (tampered > 0) {
      this.#stats.tamperedEntries += tampered;
      this.#untrust("tampered", tampered, health.tamperedReason);
    }
  }

  /** Counts `count` of `cause` in its episode, reporting the episode's start. */
  #untrust(cause: Untrusted, count: number, detail: string): void {
    const at = this.#clock();
    const episode = this.#untrusted.get(cause);
    if (episode !== undefined) {
      episode.count += count;
      episode.lastAt = at;
      return;
    }
    this.#untrusted.set(cause, { count, lastAt: at });
    this.#options.onIncident?.({ kind: "untrusted", cause, detail });
  }

  /** Ends the episodes with nothing new for a window. */
  #checkTrust(): void {
    const now = this.#clock();
    for (const [cause, episode] of this.#untrusted) {
      if (now - episode.lastAt <= this.#policy.windowMs) continue;
      this.#untrusted.delete(cause);
      this.#options.onIncident?.({ kind: "trusted", cause, count: episode.count });
    }
  }

  /** Reports the peers' clock verdict when it changes (`clock/peer_clocks.ts`). */
  #judgeClocks(): void {
    const verdict = this.#peerClocks.verdict();
    const key = verdict.kind === "self"
      ? "self"
      : verdict.kind === "agree"
      ? "agree"
      : `${verdict.kind}:${verdict.peers.map((peer) => peer.instance).sort().join(",")}`;
    if (key === this.#clockVerdict) return;
    this.#clockVerdict = key;
    this.#options.onIncident?.({ kind: "clock", verdict });
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
      error: namedMessageOf(error),
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

/** The causes of an entry not trusted. */
type Untrusted = "unreadable" | "future" | "tampered";

/** Raised when an exchange outlives its bound. */
export class SyncTimeoutError extends Error {
  /** Creates the error for a bound of `timeoutMs`. */
  constructor(timeoutMs: number) {
    super(`rate-limit sync did not answer within ${timeoutMs} ms`);
    this.name = "SyncTimeoutError";
  }
}
