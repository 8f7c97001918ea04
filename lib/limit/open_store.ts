/**
 * Opens the rate-limit store the configuration names: in memory, or a shared store (Deno KV, Redis)
 * wrapped in the failure policy.
 *
 * The shared stores are imported only when chosen, so a service on the memory store loads neither
 * the Redis client nor needs `--unstable-kv`.
 *
 * @module
 */

import type { Config } from "../config.ts";
import { MemoryStore } from "./memory.ts";
import { type RateLimitPolicy, type RateLimitStore } from "./decision.ts";
import { GuardedStore, type StoreIncident } from "./guard.ts";

/** Options of {@linkcode openRateLimitStore}. */
export interface OpenStoreOptions {
  /** Called when the memory store reaches its caller cap. */
  onCapacity?: (tracked: number) => void;
  /** Receives the start and the end of every shared-store incident. */
  onIncident?: (incident: StoreIncident) => void;
}

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
