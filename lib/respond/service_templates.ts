/**
 * Everything the service can answer, from the route table: per path, its variants, its preflight,
 * 405 and error responses; for unknown paths, the 404 in each media type and the same errors without
 * a path's fields. Each is built the first time a request needs it, then kept.
 *
 * Past a template's first use nothing here is built per request: `choose.ts` picks one of these
 * templates and the response cache answers a clone of its prebuilt response.
 *
 * @module
 */

import type { Config } from "../config.ts";
import type { HeaderField } from "../http/message.ts";
import { type Encoding, memoize, preferredEncoding, preferredType } from "../http/negotiate.ts";
import { STATUS } from "../http/message.ts";
import type { Site } from "../pages/layout.ts";
import { once } from "../once.ts";
import { ALLOWED_METHODS, COMMON_FIELDS, type Route } from "../routes.ts";
import type { Representation } from "../http/representation.ts";
import {
  createErrorRenderer,
  errorTemplates,
  type MethodTemplates,
  type RenderedError,
} from "./error_templates.ts";
import type { ResponseTemplate } from "./response_cache.ts";
import { createVariantSets, type VariantSet, type VariantTemplates } from "./variant_templates.ts";

/** The responses of a path that do not depend on its representations (for unknown paths too). */
export interface PathTemplates {
  /** 204 to OPTIONS and to a CORS preflight. */
  readonly preflight: ResponseTemplate;
  /** 400: the `Host` field is not a valid host. */
  readonly badRequest: MethodTemplates;
  /** 429: the caller's quota is spent. */
  readonly rateLimited: MethodTemplates;
  /** 429 `rate_limit_unavailable`: the store could not decide and the policy refused. */
  readonly unavailable: MethodTemplates;
  /** 500: an unexpected failure. */
  readonly internalError: MethodTemplates;
}

/** Every response of one known path. */
export interface RouteTemplates extends PathTemplates {
  /** Whether the route's representations are built (see `Route.prepare`). */
  ready: boolean;
  /** Makes the route ready. */
  prepare(): Promise<void>;
  /** Makes the route ready and builds its Markdown representations too (`handler.ready`). */
  prepareAll(): Promise<void>;
  /** Whether the route is made ready by `handler.ready` (see `Route.eager`). */
  readonly eager: boolean;
  /** The variants of the representation an `Accept` value selects (memoised). */
  pick(accept: string | null): VariantSet;
  /** 405 to any method but GET, HEAD and OPTIONS. */
  readonly methodNotAllowed: ResponseTemplate;
}

/** Every response of the service. */
export interface ServiceTemplates {
  /** The templates of each known path. */
  readonly routes: ReadonlyMap<string, RouteTemplates>;
  /** The templates of a path the service does not have. */
  readonly unknownPath: PathTemplates;
  /** The 404 of an unknown path in the media type an `Accept` value prefers (memoised). */
  notFound(accept: string | null): MethodTemplates;
  /** The variant of `set` in the coding an `Accept-Encoding` value prefers (memoised). */
  variant(set: VariantSet, acceptEncoding: string | null): VariantTemplates;
}

/**
 * What a CORS preflight is granted, on every path, known or not: the methods of the service and the
 * request fields a page may send (negotiation and revalidation), remembered for a day.
 */
const CORS_ALLOW_FIELDS: readonly HeaderField[] = [
  ["access-control-allow-methods", ALLOWED_METHODS],
  ["access-control-allow-headers", "Accept, Accept-Encoding, If-None-Match"],
  ["access-control-max-age", "86400"],
];

const VARY_ACCEPT: HeaderField = ["vary", "Accept"];

/** The media types a 404 is offered in, the default first. */
const NOT_FOUND_TYPES = ["application/json", "text/markdown", "text/html"] as const;

/** The error rendering of each media type of {@linkcode NOT_FOUND_TYPES}. */
const NOT_FOUND_RENDERING = {
  "application/json": "json",
  "text/markdown": "markdown",
  "text/html": "html",
} as const;

/** The JSON errors every path may answer with, each rendered the first time it is needed. */
interface PathErrors {
  badRequest: () => RenderedError;
  rateLimited: () => RenderedError;
  unavailable: () => RenderedError;
  internalError: () => RenderedError;
  methodNotAllowed: () => RenderedError;
}

/**
 * Builds the templates of every path of the route table `parts.routes`, and of unknown paths, with
 * the pages' layout `parts.site` for the HTML 404.
 *
 * Nothing is rendered here: each template (an error, a preflight, a 404) is built the first time a
 * request needs it and kept, so that a cold start's first 200 does not wait for the error responses
 * of every path (lib/README.md, "Cold start"). A template read twice is the same object.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadConfig, recordEnv } from "../config.ts";
 * import { loadContent } from "../pages/content.ts";
 * import { buildRoutes } from "../routes.ts";
 * const loaded = loadConfig(recordEnv({}));
 * assert(loaded.ok);
 * const content = loadContent(loaded.config);
 * assert(content.ok);
 * const table = buildRoutes(loaded.config, content.content);
 * const templates = buildServiceTemplates(loaded.config, { site: content.content.site, routes: table });
 * assert.equal(templates.routes.size, table.size);
 * assert.equal(templates.notFound("text/markdown").get.status, 404);
 * assert.equal(templates.unknownPath.preflight.status, 204);
 * assert.equal(templates.unknownPath.preflight, templates.unknownPath.preflight);
 * ```
 */
export function buildServiceTemplates(
  config: Config,
  parts: { site: Site; routes: ReadonlyMap<string, Route> },
): ServiceTemplates {
  const { site, routes: table } = parts;
  const render = createErrorRenderer(config, site);
  const errors: PathErrors = {
    badRequest: once(() => render("bad_request", "json")),
    rateLimited: once(() => render("rate_limited", "json")),
    unavailable: once(() => render("rate_limit_unavailable", "json")),
    internalError: once(() => render("internal_error", "json")),
    methodNotAllowed: once(() => render("method_not_allowed", "json")),
  };
  const sets = createVariantSets();
  // Most paths have no fields of their own: they share the unknown path's error templates, built
  // once rather than per path (each is encoded and decoded once; lib/README.md, "Cold start").
  const unknownPath = pathTemplates(errors, []);
  const shared = {
    path: unknownPath,
    methodNotAllowed: once(() => errorTemplates(errors.methodNotAllowed(), []).get),
  };
  const routes = new Map<string, RouteTemplates>();
  for (const [path, route] of table) {
    routes.set(path, routeTemplates(route, errors, sets.setOf, shared));
  }
  const notFound = {
    json: once(() => errorTemplates(render("not_found", "json"), [VARY_ACCEPT])),
    markdown: once(() => errorTemplates(render("not_found", "markdown"), [VARY_ACCEPT])),
    html: once(() => errorTemplates(render("not_found", "html"), [VARY_ACCEPT])),
  };
  const pickEncoding = memoize(preferredEncoding);
  return {
    routes,
    // A preflight to an unknown path is granted like any other, so that the page's real request goes
    // on and can read the JSON 404; it has no route fields (Link...) to add.
    unknownPath,
    notFound: memoize((accept) =>
      notFound[NOT_FOUND_RENDERING[preferredType(accept, NOT_FOUND_TYPES)]]()
    ),
    variant: (set, acceptEncoding) => {
      const encoding: Encoding = pickEncoding(acceptEncoding);
      return set[encoding] ?? sets.coded(set, encoding);
    },
  };
}

/**
 * The responses of a path that has `fields` of its own (none for an unknown path), each built when
 * first read.
 */
function pathTemplates(errors: PathErrors, fields: readonly HeaderField[]): PathTemplates {
  const preflight = once((): ResponseTemplate => ({
    status: STATUS.NoContent,
    body: null,
    fields: [...COMMON_FIELDS, ["allow", ALLOWED_METHODS], ...CORS_ALLOW_FIELDS, ...fields],
  }));
  const badRequest = once(() => errorTemplates(errors.badRequest(), fields));
  const rateLimited = once(() => errorTemplates(errors.rateLimited(), fields));
  const unavailable = once(() => errorTemplates(errors.unavailable(), fields));
  const internalError = once(() => errorTemplates(errors.internalError(), fields));
  return {
    get preflight() {
      return preflight();
    },
    get badRequest() {
      return badRequest();
    },
    get rateLimited() {
      return rateLimited();
    },
    get unavailable() {
      return unavailable();
    },
    get internalError() {
      return internalError();
    },
  };
}

/** The responses of one known path; those of a path without fields of its own are `shared`. */
function routeTemplates(
  route: Route,
  errors: PathErrors,
  setOf: (representation: Representation) => VariantSet,
  shared: { path: PathTemplates; methodNotAllowed: () => ResponseTemplate },
): RouteTemplates {
  const own = route.fields.length > 0;
  const path = own ? pathTemplates(errors, route.fields) : shared.path;
  const methodNotAllowed = own
    ? once(() => errorTemplates(errors.methodNotAllowed(), route.fields).get)
    : shared.methodNotAllowed;
  return {
    get preflight() {
      return path.preflight;
    },
    get badRequest() {
      return path.badRequest;
    },
    get rateLimited() {
      return path.rateLimited;
    },
    get unavailable() {
      return path.unavailable;
    },
    get internalError() {
      return path.internalError;
    },
    get methodNotAllowed() {
      return methodNotAllowed();
    },
    ready: false,
    eager: route.eager,
    async prepare() {
      await route.prepare();
      this.ready = true;
    },
    async prepareAll() {
      await route.prepareAll();
      this.ready = true;
    },
    pick: memoize((accept) => setOf(route.pick(accept))),
  };
}
