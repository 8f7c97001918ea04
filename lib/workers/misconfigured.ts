/**
 * What an isolate whose configuration is invalid answers: a Worker cannot refuse to start (vars
 * changed in the dashboard reach an isolate that is already deployed), so each request is answered
 * 500 `internal_error` in the Error shape, with no detail, carrying what README promises on every
 * response: the five RateLimit fields, `X-Content-Type-Options` and CORS (`Access-Control-Allow-Origin`,
 * `Access-Control-Expose-Headers`), so that a page's script can read the 500 and a client its
 * fields. A CORS preflight is answered 204 with the CORS allow fields, as the service answers every
 * preflight, so that the browser goes on to the request and its page reads the 500.
 *
 * The fields report the configured policy when `RATE_LIMIT` and `RATE_LIMIT_WINDOW_SECONDS` are
 * valid by themselves (the default 60 per 60 s otherwise), and nothing known to be left
 * (`undecided`: r=0, t the window), as the handler's own 500 does: nothing was counted, and a
 * client should slow down rather than speed up. Responses are built per request (a Worker's
 * `Response` belongs to its request) from fields built once.
 *
 * @module
 */

import { loadConfig } from "../config/config.ts";
import { type Env } from "../config/env.ts";
import { type HeaderField, isCorsPreflight, STATUS } from "../http/message.ts";
import {
  policyOf,
  rateLimitConstants,
  rateLimitFields,
  type RateLimitPolicy,
  undecided,
} from "../limit/core/decision.ts";
import { ALLOWED_METHODS, COMMON_FIELDS, CORS_ALLOW_FIELDS, TYPES } from "../respond/answers.ts";

/** The body of every answer of a misconfigured isolate (no detail: the log has it). */
const BODY = JSON.stringify({
  error: {
    code: "internal_error",
    message: "The service failed to answer this request.",
    hint: "Retry later: the service is misconfigured, and its operator has been told.",
  },
});

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
  const policyEnv: Env = (name) =>
    name === "RATE_LIMIT" || name === "RATE_LIMIT_WINDOW_SECONDS" ? env(name) : undefined;
  const loaded = loadConfig(policyEnv);
  if (loaded.ok) return policyOf(loaded.config);
  const defaults = loadConfig(() => undefined);
  if (!defaults.ok) throw new Error("the default configuration is invalid");
  return policyOf(defaults.config);
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
  const policy = fieldsPolicy(env);
  const limitFields = rateLimitFields(undecided(policy), rateLimitConstants(policy));
  const length = new TextEncoder().encode(BODY).length;
  const error: HeaderField[] = [
    ["content-type", TYPES.json],
    ["cache-control", "no-store"],
    ...COMMON_FIELDS,
    ...limitFields,
  ];
  const head: HeaderField[] = [...error, ["content-length", String(length)]];
  const preflight: HeaderField[] = [
    ...COMMON_FIELDS,
    ["allow", ALLOWED_METHODS],
    ...CORS_ALLOW_FIELDS,
    ...limitFields,
  ];
  return (request) => {
    const method = request.method;
    if (method === "OPTIONS" && isCorsPreflight(method, request.headers)) {
      return new Response(null, {
        status: STATUS.NoContent,
        headers: preflight as [string, string][],
      });
    }
    const isHead = method === "HEAD";
    return new Response(isHead ? null : BODY, {
      status: STATUS.InternalServerError,
      headers: (isHead ? head : error) as [string, string][],
    });
  };
}
