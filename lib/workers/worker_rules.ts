/**
 * What a Worker refuses or warns of in a configuration that `deno task start` takes: the values
 * that cannot work on Cloudflare, each said in one sentence naming its variable (deploy/README.md,
 * "What differs on Workers").
 *
 * - `PUBLIC_BASE_URL` with a path is refused. Behind nginx a path prefix is the proxy's to strip;
 *   a Worker's route hands the Worker each request with its path as the client sent it, and the
 *   service's paths are at the root, so every published link under the prefix would answer 404.
 *   Moving every route under the prefix would serve the discovery documents where no client looks
 *   for them (`/.well-known/api-catalog`, `/robots.txt` and `/llms.txt` mean something only at the
 *   host's root, RFC 8615 and RFC 9309), while a Worker gets a host name of its own for nothing (a
 *   custom domain): so a host of its own, not a prefix.
 * - `TRUSTED_PROXIES` is refused where it cannot be right: `unix` (no request reaches a Worker over
 *   a socket), loopback (no request reaches a Worker on Cloudflare from it: the VM recipe's nginx
 *   value, copied over), and any range that covers Cloudflare's own addresses
 *   (`cloudflare_ranges.ts`): Cloudflare sets `CF-Connecting-IP` itself, and another zone's Worker
 *   arrives from Cloudflare's Workers address with an `X-Forwarded-For` it writes, which such a
 *   range would believe, a fresh caller key per request. The one case it is right: a proxy of the
 *   operator's own in front of Cloudflare, at addresses of its own, which Cloudflare names in
 *   `CF-Connecting-IP` and appends to the `X-Forwarded-For` that proxy wrote; taken, it is warned
 *   of once, naming that case, so that no one sets it on Workers unawares.
 * - `PUBLIC_BASE_URL` over `http://` (but for a loopback address, `deno task worker`'s own) is
 *   warned: every link would send callers over plain HTTP.
 *
 * @module
 */

import type { Config } from "../config/config.ts";
import {
  type CidrSet,
  cidrSetsOverlap,
  isLoopbackHost,
  LOOPBACK,
  rangeText,
} from "../http/address.ts";
import {
  type Warning,
  workersHttpBaseUrlWarning,
  workersTrustedProxiesWarning,
} from "../lifecycle/warnings.ts";
import { cloudflareRanges } from "./cloudflare_ranges.ts";

/** What {@linkcode workerRules} found: refusals, one sentence each, and warnings. */
export interface WorkerRuleFindings {
  /** Values that cannot work on Workers. */
  errors: string[];
  /** Values that work but should not be deployed as they are (`lib/lifecycle/warnings.ts`). */
  warnings: Warning[];
}

/**
 * The Worker-only findings on a configuration `loadConfig` validated.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadConfig } from "../config/config.ts";
 * import { recordEnv } from "../config/env.ts";
 * const of = (env: Record<string, string>) => {
 *   const loaded = loadConfig(recordEnv(env));
 *   assert(loaded.ok);
 *   return workerRules(loaded.config);
 * };
 * assert.deepEqual(of({ PUBLIC_BASE_URL: "https://api.example.com" }), { errors: [], warnings: [] });
 * assert.match(of({ PUBLIC_BASE_URL: "https://api.example.com/base" }).errors[0]!, /^PUBLIC_BASE_URL/);
 * assert.match(of({ PUBLIC_BASE_URL: "https://a.example", TRUSTED_PROXIES: "2a06:98c0::/29" }).errors[0]!, /^TRUSTED_PROXIES/);
 * assert.match(of({ PUBLIC_BASE_URL: "http://api.example.com" }).warnings[0]!.message, /^PUBLIC_BASE_URL/);
 * ```
 */
export function workerRules(config: Config): WorkerRuleFindings {
  const errors: string[] = [];
  const warnings: Warning[] = [];
  const base = new URL(config.baseUrl);
  if (base.pathname !== "/") {
    errors.push(
      `PUBLIC_BASE_URL must be an origin on Workers (https://api.example.com, no path), got ${
        JSON.stringify(config.baseUrl)
      }: a Worker's route passes each request on with its path unchanged and the service's paths are at the root, so every link under ${base.pathname} would answer 404; give the service a host name of its own (a custom domain)`,
    );
  }
  const proxies = proxyProblems(config.trustedProxies);
  errors.push(...proxies);
  if (proxies.length === 0 && config.trustedProxies.ranges.length > 0) {
    warnings.push(
      workersTrustedProxiesWarning(config.trustedProxies.ranges.map(rangeText).join(",")),
    );
  }
  if (base.protocol === "http:" && !isLoopbackHost(base.hostname)) {
    warnings.push(workersHttpBaseUrlWarning(config.baseUrl, base.host));
  }
  return { errors, warnings };
}

/** The sentences refusing `TRUSTED_PROXIES` entries that cannot be right on Workers. */
function proxyProblems(proxies: CidrSet): string[] {
  const problems: string[] = [];
  if (proxies.unix) {
    problems.push(
      "TRUSTED_PROXIES=unix means nothing on Workers, where no request arrives over a socket: remove unix from it",
    );
  }
  const loopback = cidrSetsOverlap(proxies, LOOPBACK);
  if (loopback !== undefined) {
    problems.push(
      `TRUSTED_PROXIES must not list loopback on Workers, got ${
        loopback[0]
      }: no request reaches a Worker on Cloudflare from it (it is the VM recipe's value for nginx); remove it`,
    );
  }
  const cloudflare = cidrSetsOverlap(proxies, cloudflareRanges());
  if (cloudflare !== undefined) {
    problems.push(
      `TRUSTED_PROXIES must not cover Cloudflare's own addresses on Workers, got ${
        cloudflare[0]
      } (Cloudflare's ${
        cloudflare[1]
      }): Cloudflare sets CF-Connecting-IP itself, and another zone's Worker arrives from 2a06:98c0:3600::103 with an X-Forwarded-For it writes, a new caller key per request; remove it (on Workers it is only for a proxy of your own in front of Cloudflare)`,
    );
  }
  return problems;
}
