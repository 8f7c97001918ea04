/**
 * What an isolate whose configuration is invalid answers: a Worker cannot refuse to start (vars
 * changed in the dashboard reach an isolate that is already deployed), so each request is answered
 * 500 `internal_error` in the Error shape, with no detail, carrying what README promises on every
 * response: the five RateLimit fields, `X-Content-Type-Options` and CORS (`Access-Control-Allow-Origin`,
 * `Access-Control-Expose-Headers`), so that a page's script can read the 500 and a client its
 * fields. A CORS preflight is answered 204 with the CORS allow fields, as the service answers every
 * preflight, so that the browser goes on to the request and its page reads the 500.
 *
 * The answers are the handler's own, from the one catalog (`lib/errors.ts`'s `internal_error`,
 * rendered and laid out by `lib/respond/answers.ts`): a client sees one 500 whatever failed, and
 * its hint names `SUPPORT_EMAIL` when that is valid by itself (the default otherwise); no detail of
 * the misconfiguration reaches a caller (the operator's log has it). The fields report the
 * configured policy when `RATE_LIMIT` and `RATE_LIMIT_WINDOW_SECONDS` are valid by themselves (the
 * default 60 per 60 s otherwise), and nothing known to be left (`undecided`: r=0, t the window), as
 * the handler's own 500 does: nothing was counted, and a client should slow down rather than speed
 * up. Responses are built per request (a Worker's `Response` belongs to its request) from
 * templates built once.
 *
 * @module
 */

import { type Config, loadConfig } from "../config/config.ts";
import { type Env } from "../config/env.ts";
import { isCorsPreflight } from "../http/message.ts";
import {
  policyOf,
  rateLimitConstants,
  rateLimitFields,
  type RateLimitPolicy,
  undecided,
} from "../limit/core/decision.ts";
import { createErrorRenderer, fixedAnswers, forMethod } from "../respond/answers.ts";
import { buildResponse } from "../respond/response_cache.ts";

/**
 * The settings a misconfigured isolate still honours, each group when it is valid by itself: the
 * policy its fields report, and the address its 500's hint names.
 */
const KEPT_SETTINGS: readonly (readonly string[])[] = [
  ["RATE_LIMIT", "RATE_LIMIT_WINDOW_SECONDS"],
  ["SUPPORT_EMAIL"],
];

/**
 * The configuration a misconfigured isolate answers by: the defaults, with each group of
 * {@linkcode KEPT_SETTINGS} of `env` that is valid by itself.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { recordEnv } from "../config/env.ts";
 * const config = fallbackConfig(recordEnv({ RATE_LIMIT: "5", SUPPORT_EMAIL: "no", PORT: "x" }));
 * assert.equal(config.rateLimit, 5);
 * assert.equal(config.supportEmail, "support@example.com");
 * ```
 */
export function fallbackConfig(env: Env): Config {
  const only = (names: readonly string[]): Env => (name) =>
    names.includes(name) ? env(name) : undefined;
  const valid = KEPT_SETTINGS.filter((names) => loadConfig(only(names)).ok).flat();
  const loaded = loadConfig(only(valid));
  if (loaded.ok) return loaded.config;
  const defaults = loadConfig(() => undefined);
  if (!defaults.ok) throw new Error("the default configuration is invalid");
  return defaults.config;
}

/**
 * The policy the fields of a misconfigured isolate report: `RATE_LIMIT` and
 * `RATE_LIMIT_WINDOW_SECONDS` of `env` when they are valid by themselves, else the default.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { recordEnv } from "../config/env.ts";
 * assert.deepEqual(fieldsPolicy(recordEnv({ RATE_LIMIT: "5", PUBLIC_BASE_URL: "x" })), {
 *   limit: 5,
 *   windowMs: 60_000,
 * });
 * assert.deepEqual(fieldsPolicy(recordEnv({ RATE_LIMIT: "five" })), { limit: 60, windowMs: 60_000 });
 * ```
 */
export function fieldsPolicy(env: Env): RateLimitPolicy {
  return policyOf(fallbackConfig(env));
}

/**
 * The answer of an isolate whose configuration is invalid, for `env` (its bindings): 500
 * `internal_error` with the RateLimit fields and CORS, 204 to a CORS preflight, no body to HEAD.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { recordEnv } from "../config/env.ts";
 * const answer = misconfiguredAnswer(recordEnv({ RATE_LIMIT: "5" }));
 * const response = answer(new Request("https://api.example.com/api/v1/platform"));
 * assert.equal(response.status, 500);
 * assert.equal(response.headers.get("ratelimit"), '"default";r=0;t=60');
 * assert.equal(response.headers.get("ratelimit-policy"), '"default";q=5;w=60');
 * assert.equal(response.headers.get("access-control-allow-origin"), "*");
 * assert.equal((await response.json()).error.code, "internal_error");
 * ```
 */
export function misconfiguredAnswer(env: Env): (request: Request) => Response {
  const config = fallbackConfig(env);
  const policy = policyOf(config);
  const constants = rateLimitConstants(policy);
  const { name, baseUrl, supportUrl } = config;
  const render = createErrorRenderer(config, { name, baseUrl, supportUrl });
  const answers = fixedAnswers(render, rateLimitFields(undecided(policy), constants));
  return (request) => {
    const method = request.method;
    const template = isCorsPreflight(method, request.headers)
      ? answers.preflight
      : forMethod(answers.internalError, method);
    return buildResponse(template, undefined, constants);
  };
}
