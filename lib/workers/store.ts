/**
 * The Worker's limit: the Durable Object store (`lib/limit/durable_object/durable_object_store.ts`) over the namespace
 * bound as `RATE_LIMITER`, with the configuration's timeout and failure policy, its incidents
 * logged (Workers Logs).
 *
 * @module
 */
// deno-lint-ignore-file no-console -- Workers' logs are the console

import type { Config } from "../config.ts";
import { policyOf, type RateLimitStore } from "../limit/core/decision.ts";
import {
  createDurableObjectStore,
  type RateLimiterNamespace,
} from "../limit/durable_object/durable_object_store.ts";
import { type Bindings, RATE_LIMITER_BINDING } from "./bindings.ts";

/**
 * Opens the store over `bindings.RATE_LIMITER` (checked present by `workerConfig`): each decision
 * is one call to the object that owns the caller, bounded by `RATE_LIMIT_STORE_TIMEOUT_MS`, and
 * answered by `RATE_LIMIT_ON_STORE_ERROR` when that object fails or is late (the other callers'
 * objects are still asked); a caller the object refused is refused from the isolate's memory, with
 * no call, until its refusal ends.
 */
export function openDurableStore(bindings: Bindings, config: Config): RateLimitStore {
  const namespace = bindings[RATE_LIMITER_BINDING] as RateLimiterNamespace;
  return createDurableObjectStore(namespace, {
    policy: policyOf(config),
    timeoutMs: config.rateLimitStoreTimeoutMs,
    onError: config.rateLimitOnStoreError,
    onIncident: (incident) =>
      incident.kind === "unavailable"
        ? console.error(
          `the rate limiter's Durable Object failed or was late: requests are answered by RATE_LIMIT_ON_STORE_ERROR=${incident.policy} until it answers again`,
          incident.error,
        )
        : console.error("the rate limiter's Durable Object answers again", incident),
  });
}
