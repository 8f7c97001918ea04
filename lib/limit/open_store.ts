/**
 * Opens the rate-limit store the configuration names: in memory, or a shared store (Deno KV, Redis)
 * wrapped in the failure policy.
 *
 * The shared stores are imported only when chosen, so a service on the memory store loads neither
 * the Redis client nor needs `--unstable-kv`.
 *
 * @module
 */

import { policyOf, type PolicySettings, type RateLimitStore } from "./decision.ts";
import { GuardedStore, type StoreFailurePolicy, type StoreIncident } from "./guard.ts";
import { MemoryStore } from "./memory.ts";

/** Where rate-limit state lives: this process, Deno KV, or Redis. */
export type RateLimitStoreKind = "memory" | "kv" | "redis";

/** What {@linkcode openRateLimitStore} reads of the configuration (the service's `Config` is one). */
export interface StoreSettings extends PolicySettings {
  /** Where rate-limit state lives. */
  rateLimitStore: RateLimitStoreKind;
  /** Most callers tracked at once by the in-memory store. */
  rateLimitMaxCallers: number;
  /** Deno KV database (file path or URL); undefined means `Deno.openKv()`'s default. */
  kvPath: string | undefined;
  /** Redis connection URL; set whenever `rateLimitStore` is `redis`. */
  redisUrl: string | undefined;
  /** The longest a shared store may take to decide, in ms. */
  rateLimitStoreTimeoutMs: number;
  /** What to answer when the shared store fails or times out. */
  rateLimitOnStoreError: StoreFailurePolicy;
}

/** Options of {@linkcode openRateLimitStore}. */
export interface OpenStoreOptions {
  /** Called when the memory store reaches its caller cap. */
  onCapacity?: (tracked: number) => void;
  /** Receives the start and the end of every shared-store incident. */
  onIncident?: (incident: StoreIncident) => void;
}

/**
 * Opens the configured store. A shared store that is unreachable at start-up does not stop the
 * service: its calls fail, the failure policy answers, and limiting resumes when the store is back.
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
  let store: RateLimitStore;
  if (config.rateLimitStore === "kv") {
    const { openKvStore } = await import("./kv.ts");
    store = await openKvStore(policy, { path: config.kvPath });
  } else {
    const { openRedisStore } = await import("./redis.ts");
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
