/**
 * The per-request choice: which prebuilt answer a request gets, given its path's answers (or none)
 * and the limiter's decision. Nothing is built here; every answer comes from `answers.ts`, or, while
 * it is being built, is a promise of it.
 *
 * In order: a refused request gets its 429; an invalid `Host` its 400 (RFC 9112 section 3.2); an
 * unknown path its 404 in the preferred media type; GET and HEAD the variant that `Accept` and
 * `Accept-Encoding` select, or its 304 when `If-None-Match` matches; OPTIONS its 204; any other method
 * its 405.
 *
 * @module
 */

import { createHostCheck, ifNoneMatchMatches } from "../http/message.ts";
import type { Decision } from "../limit/decision.ts";
import type { GetAndHead, PathAnswers, VariantAnswers } from "./answers.ts";
import type { Answers } from "./paths.ts";
import type { ResponseTemplate } from "./response_cache.ts";

/** Picks the answer of a request on `path` (`undefined`: an unknown path) after `decision`. */
export type Chooser = (
  request: Pick<Request, "method" | "headers">,
  path: PathAnswers | undefined,
  decision: Decision,
) => ResponseTemplate | Promise<ResponseTemplate>;

/** HEAD's answer of `pair` for HEAD, GET's for every other method. */
function forMethod(pair: GetAndHead, method: string): ResponseTemplate {
  return method === "HEAD" ? pair.head : pair.get;
}

/**
 * The response of a variant to an admitted GET or HEAD: its 304 when `If-None-Match` matches its
 * ETag, otherwise its 200 (without the body for HEAD).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { buildRepresentation } from "../http/representation.ts";
 * import { variantAnswers } from "./answers.ts";
 * const variant = variantAnswers((await buildRepresentation("text/plain", "hi")).variants.identity);
 * const revalidation = new Request("http://localhost/", { headers: { "if-none-match": variant.etag } });
 * assert.equal(variantResponse(revalidation, variant), variant.notModified);
 * assert.equal(variantResponse(new Request("http://localhost/", { method: "HEAD" }), variant), variant.head);
 * ```
 */
export function variantResponse(
  request: Pick<Request, "method" | "headers">,
  variant: VariantAnswers,
): ResponseTemplate {
  const ifNoneMatch = request.headers.get("if-none-match");
  if (ifNoneMatch !== null && ifNoneMatchMatches(ifNoneMatch, variant.etag)) {
    return variant.notModified;
  }
  return forMethod(variant, request.method);
}

/**
 * Creates the chooser over the service's answers (it remembers the last valid `Host`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadConfig, recordEnv } from "../config.ts";
 * import { loadContent } from "../pages/content.ts";
 * import { buildAnswers } from "./paths.ts";
 * const loaded = loadConfig(recordEnv({}));
 * assert(loaded.ok);
 * const content = loadContent(loaded.config);
 * assert(content.ok);
 * const answers = buildAnswers(loaded.config, content.content);
 * const choose = createChooser(answers);
 * const admitted = { allowed: true, remaining: 59, resetSeconds: 60 };
 * const request = new Request("http://localhost/x", { method: "DELETE" });
 * assert.equal((await choose(request, answers.paths.get("/llms.txt"), admitted)).status, 405);
 * assert.equal((await choose(request, undefined, admitted)).status, 404);
 * ```
 */
export function createChooser(answers: Answers): Chooser {
  const hostIsValid = createHostCheck();
  return (request, path, decision) => {
    const method = request.method;
    const fixed = path === undefined ? answers.unknown : path.fixed;
    if (!decision.allowed) {
      return forMethod(decision.unavailable ? fixed.unavailable : fixed.rateLimited, method);
    }
    const headers = request.headers;
    const host = headers.get("host");
    if (host !== null && !hostIsValid(host)) return forMethod(fixed.badRequest, method);
    if (path === undefined) {
      const notFound = answers.notFound(headers.get("accept"));
      return notFound instanceof Promise
        ? notFound.then((pair) => forMethod(pair, method))
        : forMethod(notFound, method);
    }
    if (method === "GET" || method === "HEAD") {
      const variant = path.variant(headers.get("accept"), headers.get("accept-encoding"));
      return variant instanceof Promise
        ? variant.then((built) => variantResponse(request, built))
        : variantResponse(request, variant);
    }
    return method === "OPTIONS" ? fixed.preflight : fixed.methodNotAllowed;
  };
}
