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
import { forMethod } from "./error_templates.ts";
import type { ResponseTemplate } from "./response_cache.ts";
import type { PathTemplates, RouteTemplates, ServiceTemplates } from "./service_templates.ts";

/** Picks the template of a request on `route` (`undefined`: an unknown path) after `decision`. */
export type Chooser = (
  request: Pick<Request, "method" | "headers">,
  route: RouteTemplates | undefined,
  decision: Decision,
) => ResponseTemplate;

/**
 * The template of a refusal: `rate_limit_unavailable` when the store could not decide, otherwise
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
 * assert.equal(refusal(path, refused, "GET"), path.rateLimited.get);
 * assert.equal(refusal(path, { ...refused, unavailable: true }, "HEAD"), path.unavailable.head);
 * ```
 */
export function refusal(
  path: Pick<PathTemplates, "rateLimited" | "unavailable">,
  decision: Decision,
  method: string,
): ResponseTemplate {
  return forMethod(decision.unavailable ? path.unavailable : path.rateLimited, method);
}

/**
 * The template of an admitted GET or HEAD of a known path: the variant of the representation that
 * `Accept` and `Accept-Encoding` select, or its 304 when `If-None-Match` matches the variant's ETag.
 */
export function representationTemplate(
  request: Pick<Request, "method" | "headers">,
  route: RouteTemplates,
  templates: Pick<ServiceTemplates, "variant">,
): ResponseTemplate {
  const headers = request.headers;
  const set = route.pick(headers.get("accept"));
  const variant = templates.variant(set, headers.get("accept-encoding"));
  const ifNoneMatch = headers.get("if-none-match");
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
 * const templates = buildServiceTemplates(loaded.config, content.content.site, table);
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
    if (!decision.allowed) return refusal(route ?? templates.unknownPath, decision, method);
    const headers = request.headers;
    const host = headers.get("host");
    if (host !== null && !hostIsValid(host)) {
      return forMethod((route ?? templates.unknownPath).badRequest, method);
    }
    if (route === undefined) return forMethod(templates.notFound(headers.get("accept")), method);
    if (method === "GET" || method === "HEAD") {
      return representationTemplate(request, route, templates);
    }
    if (method === "OPTIONS") return route.preflight;
    return route.methodNotAllowed;
  };
}
