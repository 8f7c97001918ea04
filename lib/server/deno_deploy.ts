/**
 * Deno Deploy: how the service recognises the platform and the defaults it takes there.
 *
 * Deploy runs the entrypoint with `deno run` and every permission, sets `DENO_DEPLOY=true` and other
 * predefined variables, chooses the listening address itself (`DENO_SERVE_ADDRESS`, which
 * `Deno.serve` honours), and stops an instance with SIGINT, killing it 5 s later. Its documented URLs
 * are `https://<app>.<org>.deno.net` for the production timeline, `https://<app>--<branch>.<org>.deno.net`
 * for a git branch and `https://<app>-<revision>.<org>.deno.net` for a preview.
 *
 * @module
 */

import type { Env, EnvName } from "../config/env.ts";

/** A look-up of any environment variable by name, such as `Deno.env.get`. */
export type RawEnv = (name: string) => string | undefined;

/**
 * The store timeout on Deno Deploy. KV's primary is in one region (us-east4) and an exact decision
 * takes two round trips: about 180 ms from Europe and 400 ms from Asia or Australia, so the 100 ms
 * that suits a store in the same data centre would answer nearly every request by the failure policy.
 */
export const DEPLOY_STORE_TIMEOUT_MS = 1000;

/**
 * The consistency on Deno Deploy: `local-first`. With KV's primary one or two regions away, an
 * exact decision makes every request wait 180 to 400 ms; local-first answers at once and syncs in
 * the background, at the cost of a bounded overshoot (see `lib/limit/local_first/local_first_store.ts`).
 */
const DEPLOY_CONSISTENCY = "local-first";

/** The result of {@linkcode deployEnv}: the environment to configure from, or why it cannot be. */
export interface DeployEnv {
  /** The environment with the platform's defaults beneath what the operator set. */
  env: Env;
  /** Problems that stop start-up, each one sentence naming the variable and the fix. */
  errors: string[];
  /** The public base URL derived from the platform, when the operator set none. */
  derivedBaseUrl?: string;
}

/** One DNS label, as the `deno.net` host names are made of (RFC 1123). */
const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * Whether the process runs on Deno Deploy (the platform sets `DENO_DEPLOY=true`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(onDenoDeploy((name) => ({ DENO_DEPLOY: "true" })[name]), true);
 * assert.equal(onDenoDeploy(() => undefined), false);
 * ```
 */
export function onDenoDeploy(read: RawEnv): boolean {
  return read("DENO_DEPLOY") === "true";
}

/**
 * The URL Deno Deploy gives the running timeline, from `DENO_DEPLOY_APP_SLUG`,
 * `DENO_DEPLOY_ORG_SLUG` and `DENO_TIMELINE`; undefined when they do not make a valid host name.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const env: Record<string, string> = {
 *   DENO_DEPLOY_APP_SLUG: "discovery",
 *   DENO_DEPLOY_ORG_SLUG: "acme",
 *   DENO_TIMELINE: "production",
 * };
 * assert.equal(deployUrl((name) => env[name]), "https://discovery.acme.deno.net");
 * ```
 */
export function deployUrl(read: RawEnv): string | undefined {
  const app = read("DENO_DEPLOY_APP_SLUG") ?? "";
  const org = read("DENO_DEPLOY_ORG_SLUG") ?? "";
  const timeline = read("DENO_TIMELINE") ?? "";
  let label: string | undefined;
  if (timeline === "production") label = app;
  else if (timeline.startsWith("git-branch/")) label = `${app}--${timeline.slice(11)}`;
  else if (timeline.startsWith("preview/")) label = `${app}-${timeline.slice(8)}`;
  if (label === undefined || !LABEL.test(label) || !LABEL.test(org)) return undefined;
  return `https://${label}.${org}.deno.net`;
}

/**
 * The environment the service configures itself from. Off Deno Deploy it is `read` as it is. On
 * Deploy: `PORT` and `HOSTNAME` are not read (the platform chooses the address); `HEALTH_PORT`
 * stops start-up (the platform routes one address to the app and probes none); an unset
 * `PUBLIC_BASE_URL` is the timeline's documented URL, or start-up stops when it cannot be derived;
 * `RATE_LIMIT_STORE_TIMEOUT_MS` defaults to {@linkcode DEPLOY_STORE_TIMEOUT_MS} and
 * `RATE_LIMIT_CONSISTENCY` to {@linkcode DEPLOY_CONSISTENCY}.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const env: Record<string, string> = {
 *   DENO_DEPLOY: "true",
 *   DENO_DEPLOY_APP_SLUG: "discovery",
 *   DENO_DEPLOY_ORG_SLUG: "acme",
 *   DENO_TIMELINE: "production",
 *   PORT: "80",
 * };
 * const result = deployEnv((name) => env[name]);
 * assert.deepEqual(result.errors, []);
 * assert.equal(result.env("PUBLIC_BASE_URL"), "https://discovery.acme.deno.net");
 * assert.equal(result.env("PORT"), undefined);
 * assert.equal(result.env("RATE_LIMIT_STORE_TIMEOUT_MS"), "1000");
 * assert.equal(result.env("RATE_LIMIT_CONSISTENCY"), "local-first");
 * env.HEALTH_PORT = "8081";
 * assert.match(deployEnv((name) => env[name]).errors[0]!, /^HEALTH_PORT cannot be served on Deno Deploy/);
 * ```
 */
export function deployEnv(read: RawEnv): DeployEnv {
  if (!onDenoDeploy(read)) return { env: read, errors: [] };
  const set = (name: EnvName): string | undefined => {
    const value = read(name)?.trim();
    return value === "" ? undefined : value;
  };
  const defaults: Partial<Record<EnvName, string>> = {
    RATE_LIMIT_STORE_TIMEOUT_MS: String(DEPLOY_STORE_TIMEOUT_MS),
    RATE_LIMIT_CONSISTENCY: DEPLOY_CONSISTENCY,
  };
  const result: DeployEnv = { env: read, errors: [] };
  if (set("HEALTH_PORT") !== undefined) {
    result.errors.push(
      "HEALTH_PORT cannot be served on Deno Deploy, which routes one address to the app and probes no port of its own: unset it (the platform starts and stops instances itself)",
    );
  }
  if (set("PUBLIC_BASE_URL") === undefined) {
    const derived = deployUrl(read);
    if (derived === undefined) {
      result.errors.push(
        `PUBLIC_BASE_URL must be set on Deno Deploy when the timeline's URL cannot be derived (DENO_TIMELINE ${
          JSON.stringify(read("DENO_TIMELINE") ?? "")
        }): set it to the app's public URL, e.g. https://api.example.com`,
      );
    } else {
      defaults.PUBLIC_BASE_URL = derived;
      result.derivedBaseUrl = derived;
    }
  }
  result.env = (name) => {
    if (name === "PORT" || name === "HOSTNAME") return undefined;
    return set(name) ?? defaults[name];
  };
  return result;
}
