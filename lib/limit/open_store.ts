/**
 * Opens the rate-limit store the configuration names: in memory, or a shared store (Deno KV, Redis)
 * either wrapped in the failure policy (`exact`) or decided locally and synced in batches
 * (`local-first`, `local_first.ts` over a backend of `sync.ts`).
 *
 * The shared stores and the failure policy are imported only when chosen, so a service on the memory
 * store loads neither them nor the Redis client, nor needs `--unstable-kv`.
 *
 * @module
 */

import { policyOf, type PolicySettings, type RateLimitStore } from "./decision.ts";
import type { StoreFailurePolicy, StoreIncident } from "./guard.ts";
import type { SyncBackend, SyncIncident } from "./local_first.ts";
import { MemoryStore } from "./memory.ts";

/** Where rate-limit state lives: this process, Deno KV, or Redis. */
export type RateLimitStoreKind = "memory" | "kv" | "redis";

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
  /**
   * Redis connection URL; set whenever `rateLimitStore` is `redis`. With `cluster` and `sentinel`, a
   * comma-separated list of seed nodes or sentinels.
   */
  redisUrl: string | undefined;
  /** How Redis is deployed: one server, a cluster, or a primary watched by Sentinel. */
  redisType: "single" | "cluster" | "sentinel";
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
  /** Called when the memory store reaches its caller cap. */
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
  /** Wraps the backend of `local-first` (telemetry: every sync, timed); omitted means no wrapper. */
  wrapBackend?: (backend: SyncBackend) => SyncBackend;
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
 * store is back; in `local-first` its syncs fail, each instance limits by its own log meanwhile,
 * and the first sync that succeeds reconciles the counts.
 */
export async function openRateLimitStore(
  config: StoreSettings,
  options: OpenStoreOptions = {},
): Promise<RateLimitStore> {
  const policy = policyOf(config);
  if (config.rateLimitStore === "memory") {
    return new MemoryStore(policy, {
      maxCallers: config.rateLimitMaxCallers,
      ...(options.onCapacity ? { onCapacity: options.onCapacity } : {}),
    });
  }
  if (config.rateLimitConsistency === "local-first") return await openLocalFirst(config, options);
  let store: RateLimitStore;
  if (config.rateLimitStore === "kv") {
    const { openKvStore } = await import("./kv.ts");
    store = await openKvStore(policy, { path: config.kvPath });
  } else {
    const { openRedisStore } = await import("./redis.ts");
    store = await openRedisStore(redisTargetOf(config), policy, {
      connectWaitMs: Math.max(config.rateLimitStoreTimeoutMs, MIN_REDIS_CONNECT_WAIT_MS),
    });
  }
  // The failure policy and its circuit breaker serve only a shared store: not loaded for memory.
  const { GuardedStore } = await import("./guard.ts");
  return new GuardedStore(options.wrapStore?.(store) ?? store, {
    policy,
    ...(config.rateLimitStore === "redis" ? { probeIntervalMs: REDIS_PROBE_INTERVAL_MS } : {}),
    timeoutMs: config.rateLimitStoreTimeoutMs,
    onError: config.rateLimitOnStoreError,
    ...(options.onIncident ? { onIncident: options.onIncident } : {}),
  });
}

/** The `local-first` store over the configured backend. */
async function openLocalFirst(
  config: StoreSettings,
  options: OpenStoreOptions,
): Promise<RateLimitStore> {
  const policy = policyOf(config);
  let backend: SyncBackend;
  if (config.rateLimitStore === "kv") {
    const { KvSyncBackend } = await import("./sync.ts");
    backend = new KvSyncBackend(await Deno.openKv(config.kvPath), policy.windowMs, {
      ownsKv: true,
    });
  } else {
    const [{ RedisSyncBackend }, { openRedisStoreClient }] = await Promise.all([
      import("./sync.ts"),
      import("./redis_client.ts"),
    ]);
    const client = await openRedisStoreClient(redisTargetOf(config), {
      connectWaitMs: Math.max(config.rateLimitStoreTimeoutMs, MIN_REDIS_CONNECT_WAIT_MS),
    });
    backend = new RedisSyncBackend(client, policy.windowMs, { ownsClient: true });
  }
  const { LocalFirstStore } = await import("./local_first.ts");
  return new LocalFirstStore(options.wrapBackend?.(backend) ?? backend, policy, {
    syncMs: config.rateLimitSyncMs,
    syncTimeoutMs: Math.max(config.rateLimitStoreTimeoutMs, MIN_SYNC_TIMEOUT_MS),
    // A caller new here waits for the store at most as long as an `exact` decision would.
    waitMs: config.rateLimitStoreTimeoutMs,
    maxCallers: config.rateLimitMaxCallers,
    ...(options.onSyncIncident ? { onIncident: options.onSyncIncident } : {}),
  });
}

/** Where Redis is, from the settings (`REDIS_URL` is required by `loadConfig` with the Redis store). */
function redisTargetOf(config: StoreSettings) {
  return {
    type: config.redisType,
    urls: config.redisUrl!.split(",").map((url) => url.trim()).filter((url) => url !== ""),
    sentinelMaster: config.redisSentinelMaster,
  };
}
