/**
 * Opens the rate-limit store the configuration names: in memory, or a shared store (Deno KV, Redis)
 * either wrapped in the failure policy (`exact`) or decided locally and shared through a hit log
 * (`local-first`, `local_first/local_first_store.ts` over `redis/redis_hit_log.ts`, `kv/kv_hit_log.ts`
 * or `sqlite/sqlite_hit_log.ts`, the last a hit log only).
 *
 * The shared stores and the failure policy are imported only when chosen, so a service on the memory
 * store loads neither them nor the Redis client, nor needs `--unstable-kv`.
 *
 * @module
 */

import { policyOf, type PolicySettings, type RateLimitStore } from "./core/decision.ts";
import type { StoreFailurePolicy, StoreIncident } from "./guard/guarded_store.ts";
import type { HitLog } from "./core/hit_log.ts";
import type { RedisType } from "./redis/redis_client.ts";
import type { SyncIncident } from "./local_first/local_first_store.ts";
import type { StoreClock } from "./clock/store_clock.ts";
import { MemoryStore } from "./memory/memory_store.ts";
import { KV_SLEW_RATE, kvClock, memoryClock } from "./clock/steady_clock.ts";

/** Where rate-limit state lives: this process, Deno KV, Redis, or a SQLite file's hit log. */
export type RateLimitStoreKind = "memory" | "kv" | "redis" | "sqlite";

/** How a shared store decides: `exact` waits for it; `local-first` decides here and syncs in batches. */
export type RateLimitConsistency = "exact" | "local-first";

/** What {@linkcode openRateLimitStore} reads of the configuration (the service's `Config` is one). */
export interface StoreSettings extends PolicySettings {
  /** Where rate-limit state lives. */
  rateLimitStore: RateLimitStoreKind;
  /** Most callers tracked at once by the in-memory store. */
  rateLimitMaxCallers: number;
  /** Deno KV database (file path or URL); undefined means `Deno.openKv()`'s default. */
  kvPath: string | undefined;
  /** The SQLite file of `sqlite`'s hit log; set whenever `rateLimitStore` is `sqlite`. */
  sqlitePath: string | undefined;
  /**
   * Redis connection URL; set whenever `rateLimitStore` is `redis`. With `cluster` and `sentinel`, a
   * comma-separated list of seed nodes or sentinels.
   */
  redisUrl: string | undefined;
  /** How Redis is deployed: one server, a cluster, or a primary watched by Sentinel. */
  redisType: RedisType;
  /** The primary's group name the sentinels watch; set whenever `redisType` is `sentinel`. */
  redisSentinelMaster: string | undefined;
  /** The longest a shared store may take to decide, in ms. */
  rateLimitStoreTimeoutMs: number;
  /** What to answer when the shared store fails or times out. */
  rateLimitOnStoreError: StoreFailurePolicy;
  /** How `kv` and `redis` decide: waiting for the store (`exact`) or locally with batched syncs. */
  rateLimitConsistency: RateLimitConsistency;
  /** The shortest time between two syncs of `local-first`, in ms. */
  rateLimitSyncMs: number;
}

/** Options of {@linkcode openRateLimitStore}. */
export interface OpenStoreOptions {
  /** Called when the memory store (also `local-first`'s) reaches its caller cap. */
  onCapacity?: (tracked: number) => void;
  /** Receives the start and the end of every shared-store incident. */
  onIncident?: (incident: StoreIncident) => void;
  /** Receives the start and the end of every sync outage of `local-first`. */
  onSyncIncident?: (incident: SyncIncident) => void;
  /**
   * Wraps the shared store of `exact` before the failure policy does (telemetry: every call to the
   * store itself, timed); omitted means no wrapper.
   */
  wrapStore?: (store: RateLimitStore) => RateLimitStore;
  /** Wraps the hit log of `local-first` (telemetry: every exchange, timed); omitted means no wrapper. */
  wrapHitLog?: (log: HitLog) => HitLog;
  /**
   * Called once per episode when this instance's clock is more than a second from the shared store's
   * (Deno KV: behind another instance's stamps), with the offset in ms (`clock/store_clock.ts`).
   */
  onClockOffset?: (offsetMs: number) => void;
  /**
   * Called when Redis starts refusing `REDIS_URL`'s credentials after start-up (a refusal at start
   * ends it instead), with the sentence naming them, and with undefined when it accepts them again:
   * once per change, whatever the reconnection attempts between (`redis/redis_client.ts`).
   */
  onStoreRefusedCredentials?: (refused: string | undefined) => void;
}

/**
 * The longest a `local-first` sync may take: the store timeout, but at least 5 s, since no request
 * waits for it and a shorter bound only failed syncs that were about to succeed (a saturated machine
 * took over a second for some).
 */
export const MIN_SYNC_TIMEOUT_MS = 5000;

/** The shortest wait for Redis's first connection at start-up, in ms: it returns either way. */
export const MIN_REDIS_CONNECT_WAIT_MS = 1000;

/**
 * How often a Redis store that failed is probed, in ms: its client fails at once while it is
 * disconnected, so a probe is cheap, and after a failover it is what stands between the promoted
 * replica and limiting again.
 */
export const REDIS_PROBE_INTERVAL_MS = 250;

/**
 * Opens the configured store. A shared store that is unreachable at start-up does not stop the
 * service: in `exact` its calls fail, the failure policy answers, and limiting resumes when the
 * store is back; in `local-first` its exchanges fail, each instance limits by what it knows
 * meanwhile, and the backlog of hits is sent once the store answers.
 */
export async function openRateLimitStore(
  config: StoreSettings,
  options: OpenStoreOptions = {},
): Promise<RateLimitStore> {
  if (config.rateLimitStore === "memory") return openMemory(config, options);
  const open = OPENERS[config.rateLimitStore][config.rateLimitConsistency];
  return await open(config, options);
}

/** Opens a shared store in one consistency mode. */
type Opener = (config: StoreSettings, options: OpenStoreOptions) => Promise<RateLimitStore>;

/**
 * The combinations of a shared store and a consistency mode: `exact` decides in the store, behind
 * the failure policy; `local-first` decides here, sharing hits through the store's hit log. The
 * memory store, one process, has no mode.
 */
const OPENERS: Readonly<
  Record<Exclude<RateLimitStoreKind, "memory">, Readonly<Record<RateLimitConsistency, Opener>>>
> = {
  kv: {
    "exact": (config, options) => openExact(config, options, kvExact),
    "local-first": (config, options) => openLocalFirst(config, options, kvHitLog),
  },
  redis: {
    "exact": (config, options) => openExact(config, options, redisExact),
    "local-first": (config, options) => openLocalFirst(config, options, redisHitLog),
  },
  // A hit log only (`loadConfig` refuses `exact` with it).
  sqlite: {
    "exact": () => Promise.reject(new RangeError("RATE_LIMIT_STORE=sqlite is local-first only")),
    "local-first": (config, options) => openLocalFirst(config, options, sqliteHitLog),
  },
};

/** The memory store, deciding by the monotonic clock: a step of the wall clock moves no window. */
function openMemory(config: StoreSettings, options: OpenStoreOptions): RateLimitStore {
  return new MemoryStore(policyOf(config), {
    maxCallers: config.rateLimitMaxCallers,
    clock: memoryClock(),
    ...(options.onCapacity ? { onCapacity: options.onCapacity } : {}),
  });
}

/** A shared store as `exact` uses it, with the clock that measures its offset. */
interface ExactBackend {
  store: RateLimitStore;
  clock: StoreClock;
  /** How often the guard probes the store while its breaker is open; the guard's default if omitted. */
  probeIntervalMs?: number;
  /** How much faster than the steady clock the clock that decides may run (Deno KV's slewing). */
  storeClockRate?: number;
}

/** A shared store in `exact`: `backend` behind the failure policy, its clock's offset observed. */
async function openExact(
  config: StoreSettings,
  options: OpenStoreOptions,
  backend: (config: StoreSettings, options: OpenStoreOptions) => Promise<ExactBackend>,
): Promise<RateLimitStore> {
  const { store, clock, probeIntervalMs, storeClockRate } = await backend(config, options);
  // The failure policy and its circuit breaker serve only a shared store: not loaded for memory.
  const [{ GuardedStore }, { observedClock }] = await Promise.all([
    import("./guard/guarded_store.ts"),
    import("./clock/store_clock.ts"),
  ]);
  return observedClock(
    new GuardedStore(options.wrapStore?.(store) ?? store, {
      policy: policyOf(config),
      ...(probeIntervalMs !== undefined ? { probeIntervalMs } : {}),
      ...(storeClockRate !== undefined ? { storeClockRate } : {}),
      timeoutMs: config.rateLimitStoreTimeoutMs,
      onError: config.rateLimitOnStoreError,
      ...(options.onIncident ? { onIncident: options.onIncident } : {}),
    }),
    clock,
  );
}

/**
 * Deno KV in `exact`: it has no clock, so it stamps by this instance's, which follows a step of the
 * wall clock only slowly; the other instances' stamps are compared with it.
 */
async function kvExact(config: StoreSettings, options: OpenStoreOptions): Promise<ExactBackend> {
  const policy = policyOf(config);
  const [{ StoreClock }, { openKvStore }] = await Promise.all([
    import("./clock/store_clock.ts"),
    import("./kv/kv_store.ts"),
  ]);
  const stamps = kvClock(policy.windowMs);
  const clock = new StoreClock({ wall: stamps, ...onOffsetOf(options) });
  const store = await openKvStore(policy, {
    path: config.kvPath,
    onStamp: (newest) => clock.observeStamp(newest),
    clock: stamps,
  });
  // Its stamps follow a step of the wall clock at up to KV_SLEW_RATE: a refusal's memo ends that much early.
  return { store, clock, storeClockRate: KV_SLEW_RATE };
}

/** Redis in `exact`: it decides by its own clock; this one only measures the offset, from replies. */
async function redisExact(config: StoreSettings, options: OpenStoreOptions): Promise<ExactBackend> {
  const [{ StoreClock, CLOCK_INTERVAL_MS }, { openRedisStore }] = await Promise.all([
    import("./clock/store_clock.ts"),
    import("./redis/redis_store.ts"),
  ]);
  const clock = new StoreClock(onOffsetOf(options));
  let sampled = -Infinity;
  const store = await openRedisStore(redisTargetOf(config), policyOf(config), {
    connectWaitMs: Math.max(config.rateLimitStoreTimeoutMs, MIN_REDIS_CONNECT_WAIT_MS),
    storeTimeoutMs: config.rateLimitStoreTimeoutMs,
    ...onCredentialsOf(options),
    // One sample per interval is plenty: the rest of the replies cost nothing.
    onServerTime: (serverMs, sent, received) => {
      if (sent - sampled < CLOCK_INTERVAL_MS) return;
      sampled = sent;
      clock.observe(serverMs, sent, received);
    },
  });
  return { store, clock, probeIntervalMs: REDIS_PROBE_INTERVAL_MS };
}

/** A shared store's hit log as `local-first` uses it, with the clock that stamps the hits. */
interface SharedHitLog {
  log: HitLog;
  clock: StoreClock;
  /**
   * Whether this instance's offset is what the majority of its peers' clocks says it is (the store
   * has no clock to compare with: Deno KV).
   */
  offsetFromPeers: boolean;
}

/**
 * The `local-first` store over the hit log `backend` opens. Its first exchange, which reads the last
 * window of every instance's hits, is awaited here, before the service listens (bounded by the sync
 * timeout: a store down at start-up is an outage like any other).
 */
async function openLocalFirst(
  config: StoreSettings,
  options: OpenStoreOptions,
  backend: (
    config: StoreSettings,
    options: OpenStoreOptions,
    instance: string,
  ) => Promise<SharedHitLog>,
): Promise<RateLimitStore> {
  // One id per process: a restarted process is a new writer, and reads its predecessor's batches.
  const instance = crypto.randomUUID().slice(0, 13);
  const { log, clock, offsetFromPeers } = await backend(config, options, instance);
  const [{ LocalFirstStore }, { stampedBy }] = await Promise.all([
    import("./local_first/local_first_store.ts"),
    import("./local_first/stamped.ts"),
  ]);
  const syncTimeoutMs = Math.max(config.rateLimitStoreTimeoutMs, MIN_SYNC_TIMEOUT_MS);
  const store = new LocalFirstStore(options.wrapHitLog?.(log) ?? log, policyOf(config), {
    syncMs: config.rateLimitSyncMs,
    syncTimeoutMs,
    maxCallers: config.rateLimitMaxCallers,
    clock: () => clock.now(),
    instance,
    onIncident: (incident: SyncIncident) => {
      if (incident.kind === "clock" && offsetFromPeers) {
        clock.observeOffset(incident.verdict.kind === "self" ? -incident.verdict.offsetMs : 0);
      }
      options.onSyncIncident?.(incident);
    },
    ...(options.onCapacity ? { onCapacity: options.onCapacity } : {}),
  });
  await replay(store, syncTimeoutMs * 2);
  return stampedBy(store, clock);
}

/**
 * Deno KV's hit log. Deno KV has no clock: hits are stamped by one that a step of the wall clock
 * does not move (it follows the wall clock at a bounded rate). Whose clock is wrong is told by the
 * majority of the peers' stamps (`clock/peer_clocks.ts`, the `clock` sync incident, which is the
 * warning), not by this clock, which only keeps the verdict's offset for the metric: one peer ahead
 * must not make a healthy instance blame itself.
 */
async function kvHitLog(
  config: StoreSettings,
  _options: OpenStoreOptions,
  instance: string,
): Promise<SharedHitLog> {
  const windowMs = policyOf(config).windowMs;
  const [{ StoreClock }, { openKvHitLog }] = await Promise.all([
    import("./clock/store_clock.ts"),
    import("./kv/kv_hit_log.ts"),
  ]);
  // Opened in the KV backend: this root names no runtime API, so Node's entry runs it too.
  const log = await openKvHitLog(config.kvPath, windowMs, instance);
  return { log, clock: new StoreClock({ wall: kvClock(windowMs) }), offsetFromPeers: true };
}

/**
 * The hit log in a SQLite file (`node:sqlite`: Node 22.13+ and Deno), for instances on one machine.
 * Stamped as Deno KV's: it has no clock of its own, and whose clock is wrong is told by the majority
 * of the peers' stamps.
 */
async function sqliteHitLog(
  config: StoreSettings,
  _options: OpenStoreOptions,
  instance: string,
): Promise<SharedHitLog> {
  const windowMs = policyOf(config).windowMs;
  const [{ StoreClock }, { SqliteHitLog, explainSqliteOpenError }] = await Promise.all([
    import("./clock/store_clock.ts"),
    import("./sqlite/sqlite_hit_log.ts"),
  ]);
  const path = config.sqlitePath!;
  let log;
  try {
    log = SqliteHitLog.open(path, windowMs, { instance });
  } catch (error) {
    throw new Error(explainSqliteOpenError(error, path), { cause: error });
  }
  return { log, clock: new StoreClock({ wall: kvClock(windowMs) }), offsetFromPeers: true };
}

/**
 * Redis's hit log, stamped by the clock of the primary serving one key: one clock for every
 * instance, sampled once before the first request.
 */
async function redisHitLog(
  config: StoreSettings,
  options: OpenStoreOptions,
  instance: string,
): Promise<SharedHitLog> {
  const [{ StoreClock }, { RedisHitLog }, { openRedisStoreClient, logKey }] = await Promise.all([
    import("./clock/store_clock.ts"),
    import("./redis/redis_hit_log.ts"),
    import("./redis/redis_client.ts"),
  ]);
  const connectWaitMs = Math.max(config.rateLimitStoreTimeoutMs, MIN_REDIS_CONNECT_WAIT_MS);
  const client = await openRedisStoreClient(redisTargetOf(config), {
    connectWaitMs,
    storeTimeoutMs: config.rateLimitStoreTimeoutMs,
    ...onCredentialsOf(options),
  });
  const log = new RedisHitLog(client, policyOf(config).windowMs, { instance, ownsClient: true });
  const key = logKey(client.type, "rate_limit:", CLOCK_KEY);
  const clock = new StoreClock({ read: () => client.time(key), ...onOffsetOf(options) });
  await clock.firstSample(connectWaitMs);
  return { log, clock, offsetFromPeers: false };
}

/** The report of Redis refusing the credentials after start-up, when the caller asked for it. */
function onCredentialsOf(
  options: OpenStoreOptions,
): { onCredentials?: (refused: string | undefined) => void } {
  const report = options.onStoreRefusedCredentials;
  return report ? { onCredentials: report } : {};
}

/** The clock's offset report, when the caller asked for it. */
function onOffsetOf(options: OpenStoreOptions): { onOffset?: (offsetMs: number) => void } {
  return options.onClockOffset ? { onOffset: options.onClockOffset } : {};
}

/**
 * The first syncs, before the service listens: they read the last window a chunk at a time
 * (`more`), until the log is read, a sync fails, or `waitMs` has passed; what is left is read by the
 * sync loop, at most `MAX_EXCHANGES_PER_SYNC` chunks a period (meanwhile callers' counts lack it).
 */
async function replay(
  store: { sync(): Promise<void>; readonly synced: boolean; readonly caughtUp: boolean },
  waitMs: number,
): Promise<void> {
  const deadline = performance.now() + waitMs;
  do await store.sync(); while (store.synced && !store.caughtUp && performance.now() < deadline);
}

/** The caller whose key names the primary whose clock `local-first` reads (Redis). */
const CLOCK_KEY = "clock";

/** Where Redis is, from the settings (`REDIS_URL` is required by `loadConfig` with the Redis store). */
function redisTargetOf(config: StoreSettings) {
  return {
    type: config.redisType,
    urls: config.redisUrl!.split(",").map((url) => url.trim()).filter((url) => url !== ""),
    sentinelMaster: config.redisSentinelMaster,
  };
}
