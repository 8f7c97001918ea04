/**
 * Opens the rate-limit store the configuration names: in memory, or a shared store (Deno KV, Redis)
 * wrapped in the failure policy.
 *
 * The shared stores are imported only when chosen, so a service on the memory store loads neither
 * the Redis client nor needs `--unstable-kv`.
 *
 * @module
 */

import type { Config } from "./config.ts";
import { MemoryStore, type RateLimitPolicy, type RateLimitStore } from "./rate_limit.ts";
import { GuardedStore, type StoreIncident } from "./rate_limit_guard.ts";
import type { SyncBackend, SyncIncident } from "./rate_limit_local_first.ts";

/** Options of {@linkcode openRateLimitStore}. */
export interface OpenStoreOptions {
  /** Called when the memory store reaches its caller cap. */
  onCapacity?: (tracked: number) => void;
  /** Receives the start and the end of every shared-store incident. */
  onIncident?: (incident: StoreIncident) => void;
  /** Receives the start and the end of every sync outage of `local-first`. */
  onSyncIncident?: (incident: SyncIncident) => void;
}

/**
 * The longest a `local-first` sync may take: the store timeout, but at least 5 s, since no request
 * waits for it and a shorter bound only failed syncs that were about to succeed (a saturated machine
 * took over a second for some).
 */
export const MIN_SYNC_TIMEOUT_MS = 5000;

/** The rate-limit policy of a configuration. */
export function policyOf(config: Config): RateLimitPolicy {
  return { limit: config.rateLimit, windowMs: config.rateLimitWindowSeconds * 1000 };
}

/**
 * Opens the configured store. A shared store that is unreachable at start-up does not stop the
 * service: its calls fail, the failure policy answers, and limiting resumes when the store is back.
 */
export async function openRateLimitStore(
  config: Config,
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
    const { openKvStore } = await import("./rate_limit_kv.ts");
    store = await openKvStore(policy, { path: config.kvPath });
  } else {
    const { openRedisStore } = await import("./rate_limit_redis.ts");
    // The URL is required by loadConfig whenever the store is redis.
    store = await openRedisStore(config.redisUrl!, policy, {
      connectWaitMs: Math.max(config.rateLimitStoreTimeoutMs, 1000),
    });
  }
  return new GuardedStore(store, {
    policy,
    timeoutMs: config.rateLimitStoreTimeoutMs,
    onError: config.rateLimitOnStoreError,
    ...(options.onIncident ? { onIncident: options.onIncident } : {}),
  });
}

/** The `local-first` store over the configured backend. */
async function openLocalFirst(config: Config, options: OpenStoreOptions): Promise<RateLimitStore> {
  const policy = policyOf(config);
  let backend: SyncBackend;
  if (config.rateLimitStore === "kv") {
    const { KvSyncBackend } = await import("./rate_limit_sync.ts");
    backend = new KvSyncBackend(await Deno.openKv(config.kvPath), policy.windowMs, {
      ownsKv: true,
    });
  } else {
    const [{ RedisSyncBackend }, { openRedisStoreClient }] = await Promise.all([
      import("./rate_limit_sync.ts"),
      import("./rate_limit_redis.ts"),
    ]);
    // The URL is required by loadConfig whenever the store is redis.
    const client = await openRedisStoreClient(config.redisUrl!, {
      connectWaitMs: Math.max(config.rateLimitStoreTimeoutMs, 1000),
    });
    backend = new RedisSyncBackend(client, policy.windowMs, { ownsClient: true });
  }
  const { LocalFirstStore } = await import("./rate_limit_local_first.ts");
  return new LocalFirstStore(backend, policy, {
    syncMs: config.rateLimitSyncMs,
    syncTimeoutMs: Math.max(config.rateLimitStoreTimeoutMs, MIN_SYNC_TIMEOUT_MS),
    maxCallers: config.rateLimitMaxCallers,
    ...(options.onSyncIncident ? { onIncident: options.onSyncIncident } : {}),
  });
}
