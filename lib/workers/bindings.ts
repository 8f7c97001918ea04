/**
 * The Worker's configuration: its environment bindings (vars and secrets, strings) read through
 * `lib/config.ts`'s {@linkcode Env}, under the same rules and with the same messages as the Deno
 * service's environment variables, plus what only a Worker decides: where its limit lives.
 *
 * `PUBLIC_BASE_URL` unset takes the origin of the first request the isolate serves (on Cloudflare, a
 * hostname the Worker's routes matched; locally, `http://127.0.0.1:8787`), not the Deno default of
 * `http://localhost:8000`. `PORT`, `HOSTNAME` and `REUSE_PORT` are validated but mean nothing here.
 *
 * @module
 */

import { type Config, type Env, type EnvName, loadConfig } from "../config.ts";
import { policyOf } from "../limit/core/decision.ts";
import { checkDurablePolicy } from "../limit/durable_object/object_logs.ts";

/** The binding of the Durable Object namespace that keeps the limit (wrangler.json). */
export const RATE_LIMITER_BINDING = "RATE_LIMITER";

/** Where a Worker keeps its limit. */
export type WorkerStoreKind = "durable-object" | "memory";

/** The Worker's configuration, or every problem found. */
export type WorkerConfigResult =
  | { ok: true; config: Config; store: WorkerStoreKind }
  | { ok: false; errors: string[] };

/** A Worker's `env`: strings for vars and secrets, objects for bindings. */
export type Bindings = Readonly<Record<string, unknown>>;

/**
 * {@linkcode Env} over a Worker's bindings: a var or secret is a string; anything else (a binding
 * object) reads as unset.
 */
export function bindingsEnv(bindings: Bindings, origin: string): Env {
  return (name: EnvName) => {
    const value = bindings[name];
    if (typeof value === "string") return value;
    return name === "PUBLIC_BASE_URL" ? origin : undefined;
  };
}

/**
 * Validates the Worker's configuration. The limit lives in the Durable Object bound as
 * `RATE_LIMITER` (one limit per caller wherever the request lands); `RATE_LIMIT_STORE=memory` keeps
 * it in each isolate instead (for a test: Cloudflare runs many isolates, so the limit multiplies),
 * and `kv` and `redis` are Deno's stores.
 *
 * @param origin the first request's origin, `PUBLIC_BASE_URL`'s default
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const ok = workerConfig({ RATE_LIMITER: {}, RATE_LIMIT: "10" }, "https://api.example.com");
 * assert(ok.ok);
 * assert.equal(ok.store, "durable-object");
 * assert.equal(ok.config.baseUrl, "https://api.example.com");
 * const bad = workerConfig({ RATE_LIMIT: "ten" }, "https://api.example.com");
 * assert(!bad.ok);
 * assert.equal(bad.errors.length, 2); // RATE_LIMIT, and no RATE_LIMITER binding
 * ```
 */
export function workerConfig(bindings: Bindings, origin: string): WorkerConfigResult {
  const loaded = loadConfig(bindingsEnv(bindings, origin));
  const errors = loaded.ok ? [] : [...loaded.errors];
  const chosen = bindings.RATE_LIMIT_STORE;
  const bound = typeof bindings[RATE_LIMITER_BINDING] === "object" &&
    bindings[RATE_LIMITER_BINDING] !== null;
  let store: WorkerStoreKind = "durable-object";
  if (chosen === "memory") store = "memory";
  else if (chosen === "kv" || chosen === "redis") {
    errors.push(
      `RATE_LIMIT_STORE=${chosen} is not available on Workers: leave it unset to keep the limit in the Durable Object bound as ${RATE_LIMITER_BINDING} (wrangler.json), or set memory for a per-isolate limit`,
    );
  } else if (!bound) {
    errors.push(
      `the Durable Object binding ${RATE_LIMITER_BINDING} is missing: keep it in wrangler.json (durable_objects.bindings, class RateLimiterObject), or set RATE_LIMIT_STORE=memory for a per-isolate limit`,
    );
  }
  if (loaded.ok && store === "durable-object") {
    try {
      checkDurablePolicy(policyOf(loaded.config));
    } catch (error) {
      errors.push(`RATE_LIMIT and RATE_LIMIT_WINDOW_SECONDS: ${(error as Error).message}`);
    }
  }
  if (!loaded.ok || errors.length > 0) return { ok: false, errors };
  return { ok: true, config: loaded.config, store };
}
