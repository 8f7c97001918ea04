/**
 * `wrangler.json` as the Worker's build and local server read it: the one description of the
 * Worker (its compatibility date, its Durable Object and Rate Limiting bindings, its vars), and the
 * check both run before anything is built or served: a configuration that cannot work on Workers
 * (`lib/workers/bindings.ts`, `lib/workers/worker_rules.ts`) is refused in one sentence per problem,
 * naming the variable, and a warning is said, so that `deno task worker`, `deno task worker:build`
 * and `wrangler deploy` (whose `build.command` is `worker:build`) stop where the isolate would
 * otherwise answer 500.
 *
 * @module
 */

import { formatConfigErrors } from "../config/messages.ts";
import { type Bindings, workerConfig } from "../workers/bindings.ts";

/** A var as `wrangler.json` may give it: text, or a JSON number or boolean (objects are refused). */
export type VarValue = string | number | boolean;

/** A Rate Limiting binding as wrangler.json declares it (`ratelimits`). */
export interface RateLimitDeclaration {
  /** The binding's name in `env`. */
  name: string;
  /** The account-wide namespace (an integer, written as a string): bindings sharing it share counts. */
  namespace_id: string;
  /** The budget: `limit` calls per `period` seconds (10 or 60), per Cloudflare location. */
  simple: { limit: number; period: number };
}

/** The parts of wrangler.json the build and the local server read. */
export interface WranglerConfig {
  compatibility_date: string;
  durable_objects: { bindings: Array<{ name: string; class_name: string }> };
  ratelimits?: RateLimitDeclaration[];
  vars?: Record<string, VarValue>;
}

/** Reads `wrangler.json` from the project's `root`. */
export async function readWrangler(root: string): Promise<WranglerConfig> {
  return JSON.parse(await Deno.readTextFile(`${root}/wrangler.json`)) as WranglerConfig;
}

/** The checks' outcome: the problems (none when it can run) and the warnings, one sentence each. */
export interface DeploymentCheck {
  /** What cannot work: nothing is built or served. */
  errors: string[];
  /** What works but should not be deployed as it is. */
  warnings: string[];
}

/**
 * Checks `vars` (wrangler.json's, and for `deno task worker` the environment's over them) as an
 * isolate of the Worker `wrangler` describes would read them. `PUBLIC_BASE_URL` may be missing from
 * them when `requireBaseUrl` is false (`worker:build`: it may be a secret or a dashboard var, which
 * only the isolate sees); every var that is there is checked.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const wrangler = {
 *   compatibility_date: "2026-08-01",
 *   durable_objects: { bindings: [{ name: "RATE_LIMITER", class_name: "RateLimiterObject" }] },
 * };
 * assert.deepEqual(checkDeployment(wrangler, {}, false), { errors: [], warnings: [] });
 * const { errors } = checkDeployment(wrangler, { PUBLIC_BASE_URL: "https://a.example/base" }, true);
 * assert.match(errors[0]!, /^PUBLIC_BASE_URL must be an origin on Workers/);
 * ```
 */
export function checkDeployment(
  wrangler: WranglerConfig,
  vars: Readonly<Record<string, VarValue>>,
  requireBaseUrl: boolean,
): DeploymentCheck {
  // The bindings an isolate gets: the vars, and an object for each binding wrangler.json declares.
  const bindings: Record<string, unknown> = { ...vars };
  for (const { name } of wrangler.durable_objects.bindings) bindings[name] = {};
  if (!requireBaseUrl && !String(vars.PUBLIC_BASE_URL ?? "").trim()) {
    // Set where only the isolate sees it (a secret, the dashboard): the isolate checks it.
    bindings.PUBLIC_BASE_URL = "https://unset.invalid";
  }
  const result = workerConfig(bindings as Bindings);
  return result.ok
    ? { errors: [], warnings: result.warnings.map((warning) => warning.message) }
    : { errors: result.errors, warnings: [] };
}

/**
 * Prints `check`'s warnings, and its problems as `deno task start` prints them; true when nothing
 * stops the Worker (`what` names the step: "deno task worker").
 */
export function reportDeployment(check: DeploymentCheck, what: string): boolean {
  for (const warning of check.warnings) {
    // deno-lint-ignore no-console -- a build step's lines
    console.error(`${what}: warning: ${warning}`);
  }
  if (check.errors.length === 0) return true;
  // deno-lint-ignore no-console -- a build step's lines
  console.error(`${what}: ${formatConfigErrors(check.errors)}`);
  return false;
}

/** The `ratelimits` of `wrangler` as miniflare takes them: by binding name. */
export function miniflareRatelimits(
  wrangler: WranglerConfig,
): Record<string, Omit<RateLimitDeclaration, "name">> {
  return Object.fromEntries(
    (wrangler.ratelimits ?? []).map(({ name, namespace_id, simple }) => [
      name,
      { namespace_id: String(namespace_id), simple },
    ]),
  );
}
