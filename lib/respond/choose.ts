/**
 * The per-request choice: which prebuilt template answers a request, given its route (or none) and
 * the limiter's decision. Nothing is built here; every template comes from `service_templates.ts`.
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
import { forMethod, type MethodTemplates } from "./error_templates.ts";
import type { ResponseTemplate } from "./response_cache.ts";
import type { PathTemplates, RouteTemplates, ServiceTemplates } from "./service_templates.ts";
import type { VariantTemplates } from "./variant_templates.ts";

/** Picks the template of a request on `route` (`undefined`: an unknown path) after `decision`. */
export type Chooser = (
  request: Pick<Request, "method" | "headers">,
  route: RouteTemplates | undefined,
  decision: Decision,
) => ResponseTemplate;

/**
 * The responses of a refusal: `rate_limit_unavailable` when the store could not decide, otherwise
 * `rate_limited`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const pair = (status: number) => ({
 *   get: { status, body: "{}", fields: [] },
 *   head: { status, body: null, fields: [] },
 * });
 * const path = { rateLimited: pair(429), unavailable: pair(429) };
 * const refused = { allowed: false, remaining: 0, resetSeconds: 3 };
 * assert.equal(refusal(path, refused), path.rateLimited);
 * assert.equal(refusal(path, { ...refused, unavailable: true }), path.unavailable);
 * ```
 */
export function refusal(
  path: Pick<PathTemplates, "rateLimited" | "unavailable">,
  decision: Decision,
): MethodTemplates {
  return decision.unavailable ? path.unavailable : path.rateLimited;
}

/**
 * The response of a variant to an admitted GET or HEAD: its 304 when `If-None-Match` matches its
 * ETag, otherwise its 200 (without the body for HEAD).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { buildRepresentation } from "../http/representation.ts";
 * import { variantTemplates } from "./variant_templates.ts";
 * const variant = variantTemplates((await buildRepresentation("text/plain", "hi")).variants.identity);
 * const revalidation = new Request("http://localhost/", { headers: { "if-none-match": variant.etag } });
 * assert.equal(variantResponse(revalidation, variant), variant.notModified);
 * assert.equal(variantResponse(new Request("http://localhost/", { method: "HEAD" }), variant), variant.head);
 * ```
 */
export function variantResponse(
  request: Pick<Request, "method" | "headers">,
  variant: VariantTemplates,
): ResponseTemplate {
  const ifNoneMatch = request.headers.get("if-none-match");
  if (ifNoneMatch !== null && ifNoneMatchMatches(ifNoneMatch, variant.etag)) {
    return variant.notModified;
  }
  return request.method === "HEAD" ? variant.head : variant.ok;
}

/**
 * Creates the chooser over the service's templates (it remembers the last valid `Host`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadConfig, recordEnv } from "../config.ts";
 * import { loadContent } from "../pages/content.ts";
 * import { buildRoutes } from "../routes.ts";
 * import { buildServiceTemplates } from "./service_templates.ts";
 * const loaded = loadConfig(recordEnv({}));
 * assert(loaded.ok);
 * const content = loadContent(loaded.config);
 * assert(content.ok);
 * const table = buildRoutes(loaded.config, content.content);
 * const templates = buildServiceTemplates(loaded.config, { site: content.content.site, routes: table });
 * const choose = createChooser(templates);
 * const admitted = { allowed: true, remaining: 59, resetSeconds: 60 };
 * const request = new Request("http://localhost/x", { method: "DELETE" });
 * assert.equal(choose(request, templates.routes.get("/llms.txt"), admitted).status, 405);
 * assert.equal(choose(request, undefined, admitted).status, 404);
 * ```
 */
export function createChooser(templates: ServiceTemplates): Chooser {
  const hostIsValid = createHostCheck();
  return (request, route, decision) => {
    const method = request.method;
    if (!decision.allowed) {
      return forMethod(refusal(route ?? templates.unknownPath, decision), method);
    }
    const headers = request.headers;
    const host = headers.get("host");
    if (host !== null && !hostIsValid(host)) {
      return forMethod((route ?? templates.unknownPath).badRequest, method);
    }
    if (route === undefined) return forMethod(templates.notFound(headers.get("accept")), method);
    if (method === "GET" || method === "HEAD") {
      // The representation `Accept` selects, in the coding `Accept-Encoding` selects.
      const set = route.pick(headers.get("accept"));
      return variantResponse(request, templates.variant(set, headers.get("accept-encoding")));
    }
    if (method === "OPTIONS") return route.preflight;
    return route.methodNotAllowed;
  };
}
