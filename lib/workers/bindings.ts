/**
 * The Worker's configuration: its environment bindings (vars and secrets) read through
 * `lib/config/env.ts`'s {@linkcode Env}, under the same rules and with the same messages as the Deno
 * service's environment variables, plus what only a Worker decides: where its limit lives.
 *
 * Every name of `ENV_NAMES` is read the same way, so a variable added there works on Workers with
 * no line here. A var is text; one written in `wrangler.json` as a JSON number or boolean
 * (`"RATE_LIMIT": 5`, `"ACCESS_LOG": false`) is read as its text (`5`, `false`), and then by
 * `loadConfig`'s rules like any other; a JSON object, array or null is refused with a sentence
 * naming it. `RATE_LIMIT_STORE` is compared as `loadConfig` compares it (case does not matter).
 *
 * From the deployment only: `PUBLIC_BASE_URL` is required on Workers (there is no port to default
 * from, and a request's `Host` never becomes a link of the isolate: DESIGN, "Where it runs"), an
 * origin without a path; `TRUSTED_PROXIES` may not cover Cloudflare's own addresses; both and the
 * warning on `http://` are `worker_rules.ts`'s.
 * `ACCESS_LOG` is off unless set (Workers Logs already logs each invocation). `PORT`, `HOSTNAME`
 * and `REUSE_PORT` are validated but mean nothing here.
 *
 * @module
 */

import { type Config, loadConfig } from "../config/config.ts";
import { type Env, ENV_NAMES, type EnvName } from "../config/env.ts";
import { policyOf } from "../limit/core/decision.ts";
import { checkDurablePolicy } from "../limit/durable_object/object_logs.ts";
import { workersMaxCallers } from "./memory_cap.ts";
import type { Warning } from "../lifecycle/warnings.ts";
import { workerRules } from "./worker_rules.ts";

/** The binding of the Durable Object namespace that keeps the limit (wrangler.json). */
export const RATE_LIMITER_BINDING = "RATE_LIMITER";

/** Where a Worker keeps its limit. */
export type WorkerStoreKind = "durable-object" | "memory";

/** The Worker's configuration and its warnings (`worker_rules.ts`), or every problem found. */
export type WorkerConfigResult =
  | { ok: true; config: Config; store: WorkerStoreKind; warnings: Warning[] }
  | { ok: false; errors: string[] };

/** A Worker's `env`: strings, numbers and booleans for vars and secrets, objects for bindings. */
export type Bindings = Readonly<Record<string, unknown>>;

/**
 * The text of a var as `loadConfig` reads it: a string as is, a JSON number or boolean as its text
 * (`5`, `false`); undefined when unset or when it is no text at all ({@linkcode bindingProblems}).
 */
function textOf(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return undefined;
}

/**
 * {@linkcode Env} over a Worker's bindings: each var read as its text ({@linkcode textOf}); a
 * binding object reads as unset. No default comes from a request.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const env = bindingsEnv({ RATE_LIMIT: 5, ACCESS_LOG: false, RATE_LIMITER: {} });
 * assert.equal(env("RATE_LIMIT"), "5");
 * assert.equal(env("ACCESS_LOG"), "false");
 * assert.equal(env("PUBLIC_BASE_URL"), undefined);
 * ```
 */
export function bindingsEnv(bindings: Bindings): Env {
  return (name: EnvName) => textOf(bindings[name]);
}

/**
 * The service's variables bound to something that is no text (a JSON object, array or null in
 * `vars`, or a binding named like a variable): one sentence each, naming it.
 */
export function bindingProblems(bindings: Bindings): string[] {
  const problems: string[] = [];
  for (const name of ENV_NAMES) {
    if (!Object.hasOwn(bindings, name)) continue;
    const value = bindings[name];
    if (value === undefined || textOf(value) !== undefined) continue;
    const kind = value === null ? "null" : Array.isArray(value) ? "an array" : `a ${typeof value}`;
    problems.push(
      `${name} must be text, a number or true/false (wrangler.json vars, or a secret), got ${kind}`,
    );
  }
  return problems;
}

/**
 * Validates the Worker's configuration. The limit lives in the Durable Object bound as
 * `RATE_LIMITER` (one limit per caller wherever the request lands); `RATE_LIMIT_STORE=memory` keeps
 * it in each isolate instead (for a test: Cloudflare runs many isolates, so the limit multiplies),
 * with at most as many callers as an isolate's memory holds (`memory_cap.ts`); `kv` and `redis` are
 * Deno's stores.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const base = { PUBLIC_BASE_URL: "https://api.example.com" };
 * const ok = workerConfig({ ...base, RATE_LIMITER: {}, RATE_LIMIT: 10 });
 * assert(ok.ok);
 * assert.equal(ok.store, "durable-object");
 * assert.equal(ok.config.rateLimit, 10);
 * const bad = workerConfig({ RATE_LIMIT: "ten" });
 * assert(!bad.ok);
 * assert.equal(bad.errors.length, 3); // PUBLIC_BASE_URL, RATE_LIMIT, and no RATE_LIMITER binding
 * ```
 */
export function workerConfig(bindings: Bindings): WorkerConfigResult {
  const env = bindingsEnv(bindings);
  const loaded = loadConfig(env);
  const errors = [...bindingProblems(bindings), ...(loaded.ok ? [] : loaded.errors)];
  if (!env("PUBLIC_BASE_URL")?.trim()) {
    errors.unshift(
      "PUBLIC_BASE_URL must be set on Workers (e.g. https://api.example.com, the hostname of the Worker's route or custom domain): links are built from it, never from a request's Host",
    );
  }
  // Unset (empty is unset, as loadConfig reads it) means the Durable Object; set, it is read as
  // loadConfig reads it (trimmed, case ignored), so `Memory` is memory and `KV` is kv.
  const chosen = env("RATE_LIMIT_STORE")?.trim().toLowerCase() ?? "";
  const store: WorkerStoreKind = chosen === "memory" ? "memory" : "durable-object";
  if (chosen === "kv" || chosen === "redis" || chosen === "sqlite") {
    errors.push(
      `RATE_LIMIT_STORE=${chosen} is not available on Workers: leave it unset to keep the limit in the Durable Object bound as ${RATE_LIMITER_BINDING} (wrangler.json), or set memory for a per-isolate limit`,
    );
  } else if (store === "durable-object" && !isBound(bindings)) {
    errors.push(
      `the Durable Object binding ${RATE_LIMITER_BINDING} is missing: keep it in wrangler.json (durable_objects.bindings, class RateLimiterObject), or set RATE_LIMIT_STORE=memory for a per-isolate limit`,
    );
  }
  if (!loaded.ok) return { ok: false, errors };
  // What cannot work on Workers though `deno task start` takes it (a base path, TRUSTED_PROXIES).
  const rules = workerRules(loaded.config);
  errors.push(...rules.errors);
  if (errors.length > 0) return { ok: false, errors };
  const config = { ...loaded.config };
  // Off unless asked for: Workers Logs already logs each invocation (method, URL, status, time),
  // so the access log would be a second billed event per request (deploy/README.md).
  if (!env("ACCESS_LOG")?.trim()) config.accessLog = false;
  if (store === "durable-object") {
    try {
      checkDurablePolicy(policyOf(config));
    } catch (error) {
      errors.push(`RATE_LIMIT and RATE_LIMIT_WINDOW_SECONDS: ${(error as Error).message}`);
    }
  } else {
    const cap = workersMaxCallers(config.rateLimit);
    if (!env("RATE_LIMIT_MAX_CALLERS")?.trim()) {
      config.rateLimitMaxCallers = cap;
    } else if (config.rateLimitMaxCallers > cap) {
      errors.push(
        `RATE_LIMIT_MAX_CALLERS must be at most ${cap} on Workers with RATE_LIMIT_STORE=memory and RATE_LIMIT=${config.rateLimit} (an isolate has 128 MB; lib/limit/README.md, "Durable Objects on Workers"), got ${config.rateLimitMaxCallers}`,
      );
    }
  }
  return errors.length > 0
    ? { ok: false, errors }
    : { ok: true, config, store, warnings: rules.warnings };
}

/** Whether the `RATE_LIMITER` binding is there (an object: a namespace). */
function isBound(bindings: Bindings): boolean {
  const bound = bindings[RATE_LIMITER_BINDING];
  return typeof bound === "object" && bound !== null;
}
