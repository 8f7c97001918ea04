/**
 * The Worker's limit: the Durable Object store (`lib/limit/durable_object/durable_object_store.ts`)
 * over the namespace bound as `RATE_LIMITER`, with the configuration's timeout and failure policy,
 * the isolate's own count of the callers whose object fails, and its events logged (Workers Logs),
 * each a JSON line.
 *
 * @module
 */
// deno-lint-ignore-file no-console -- Workers' logs are the console

import { truncatedCaller } from "../access_log.ts";
import type { Config } from "../config/config.ts";
import { policyOf, type RateLimitStore } from "../limit/core/decision.ts";
import {
  createDurableObjectStore,
  type DurableObjectStoreOptions,
  type RateLimiterNamespace,
} from "../limit/durable_object/durable_object_store.ts";
import type { CallerNotice } from "../limit/guard/caller_notices.ts";
import type { StoreFailurePolicy, StoreIncident } from "../limit/guard/guarded_store.ts";
import { MemoryStore } from "../limit/memory/memory_store.ts";
import { type Bindings, RATE_LIMITER_BINDING } from "./bindings.ts";

/** The settings the Worker's store is opened with. */
export type DurableSettings = Pick<
  Config,
  | "rateLimit"
  | "rateLimitWindowSeconds"
  | "rateLimitStoreTimeoutMs"
  | "rateLimitOnStoreError"
  | "rateLimitMaxCallers"
>;

/**
 * Opens the store over `bindings.RATE_LIMITER` (checked present by `workerConfig`): each decision
 * is one call to the object that owns the caller, bounded by `RATE_LIMIT_STORE_TIMEOUT_MS`, and
 * answered by `RATE_LIMIT_ON_STORE_ERROR` when that object fails or is late (the other callers'
 * objects are still asked; under `open` the isolate counts such a caller itself); a caller the
 * object refused is refused from the isolate's memory, with no call, until its refusal ends.
 */
export function openDurableStore(bindings: Bindings, config: Config): RateLimitStore {
  const namespace = bindings[RATE_LIMITER_BINDING] as RateLimiterNamespace;
  return createDurableObjectStore(namespace, durableStoreOptions(config));
}

/**
 * The options the Worker's store is opened with (the test Worker opens its own namespaces, some
 * failing, with them too): the policy and the failure policy of `settings`, the isolate's memory
 * store (made at the first caller answered by the policy, sized as `RATE_LIMIT_STORE=memory` is on
 * Workers, no sweep: no timers there) counting the callers whose object fails, and every event of
 * the store written as a JSON line, callers truncated as the access log's.
 */
export function durableStoreOptions(settings: DurableSettings): DurableObjectStoreOptions {
  const policy = policyOf(settings);
  const onError = settings.rateLimitOnStoreError;
  return {
    policy,
    timeoutMs: settings.rateLimitStoreTimeoutMs,
    onError,
    onIncident: logIncident,
    localCount: () =>
      new MemoryStore(policy, { maxCallers: settings.rateLimitMaxCallers, sweep: false }),
    callerNotices: {
      label: truncatedCaller,
      write: (notice) => logCallerNotice(notice, onError),
    },
  };
}

/** The store's name in its events, as `RATE_LIMIT_STORE` says it on Deno. */
const STORE = "durable_object";

/** Writes the start (a warning) or the end of an outage of the whole namespace. */
function logIncident(incident: StoreIncident): void {
  if (incident.kind === "unavailable") {
    console.warn(JSON.stringify({
      level: "warn",
      message:
        "rate-limit store unavailable: answering by the failure policy (the Durable Object namespace: a caller's object and the canaries failed)",
      store: STORE,
      ...incident,
    }));
  } else {
    console.log(JSON.stringify({
      level: "info",
      message: "rate-limit store recovered: limiting resumed",
      store: STORE,
      ...incident,
    }));
  }
}

/** Writes that one caller's own object fails and how it is answered meanwhile. */
function logCallerNotice(notice: CallerNotice, policy: StoreFailurePolicy): void {
  const answered = policy === "open"
    ? "this isolate counts its requests itself, at most the limit per window"
    : "its requests are refused as rate_limit_unavailable";
  const { last, unnamedBefore, ...named } = notice;
  console.warn(JSON.stringify({
    level: "warn",
    message: `a caller's rate-limit object fails: ${answered} (said once per caller per window)`,
    store: STORE,
    policy,
    ...named,
    ...(last ? { more: "further callers this window are counted, not named" } : {}),
    ...(unnamedBefore ? { unnamedAnswersBefore: unnamedBefore } : {}),
  }));
}
