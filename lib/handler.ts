/**
 * The fetch handler: caller key -> rate-limit decision -> route -> representation -> response.
 *
 * This module is that composition and nothing else. At start-up (`prepare`) it builds the route
 * table, the response templates (`respond/service_templates.ts`, each built when first needed) and
 * the response cache, and schedules the warm-up (`warm_up.ts`, imported when it starts); per
 * request it takes the caller's key (`limit/caller.ts`), the limiter's decision (the store's `hit`,
 * or its `peek` for a CORS preflight, `preflightDecision`), the route, the template that answers
 * (`respond/choose.ts`) and a clone of its prebuilt response for that decision
 * (`respond/response_cache.ts`). Unexpected failures are caught here, once, reported and answered
 * 500 with the Error shape.
 *
 * @module
 */

import { type AccessRecord, type AccessRecorder, createAccessRecorder } from "./access_log.ts";
import type { Config } from "./config.ts";
import { isCorsPreflight, isValidHost, requestPathOf } from "./http/message.ts";
import { loadNegotiator, NegotiatorNotLoadedError } from "./http/negotiate.ts";
import { createCallerKey, type PeerInfo } from "./limit/caller.ts";
import {
  type Decision,
  policyOf,
  preflightDecision,
  rateLimitConstants,
  type RateLimitStore,
  undecided,
} from "./limit/decision.ts";
import type { Content } from "./pages/content.ts";
import { type Chooser, createChooser } from "./respond/choose.ts";
import { forMethod } from "./respond/error_templates.ts";
import {
  createResponseCache,
  type ResponseCache,
  type ResponseCacheOptions,
} from "./respond/response_cache.ts";
import {
  buildServiceTemplates,
  type RouteTemplates,
  type ServiceTemplates,
} from "./respond/service_templates.ts";
import { once } from "./once.ts";
import { buildRoutes, RepresentationPendingError, type Route } from "./routes.ts";
import { later } from "./timer.ts";
import type { WarmUpOptions } from "./warm_up.ts";

/** A fetch handler as `Deno.serve` calls it. */
export type Handler = (request: Request, info: PeerInfo) => Response | Promise<Response>;

/**
 * The service's handler, with `ready`: reading it builds the representations of every path that
 * needs no npm package (all but the pages; their ETags are Web Crypto digests, asynchronous), and it
 * resolves once they are built. Until then nothing is built: each path's first request builds its
 * own (or the warm-up does), so that a cold start's first response waits for one path, not all
 * (lib/README.md, "Cold start"). A path whose representations failed to build answers 500.
 */
export type ServiceHandler = Handler & { readonly ready: Promise<void> };

/** Options of {@linkcode createHandler}. */
export interface HandlerOptions {
  /** Validated configuration. */
  config: Config;
  /** Loaded content. */
  content: Content;
  /** Where rate-limit state lives. */
  store: RateLimitStore;
  /** Clock in ms since the epoch; defaults to `Date.now`. */
  now?: () => number;
  /** Receives one record per request; omitted means no access log. */
  accessLog?: (record: AccessRecord) => void;
  /** Receives unexpected errors (answered 500). */
  onError?: (error: unknown) => void;
  /**
   * Called once, the first time a request's caller has no IP address (a unix-socket or vsock peer
   * not trusted by `TRUSTED_PROXIES=unix`, or one that forwarded no client address): such requests
   * share one rate-limit budget, which the operator must hear about.
   */
  onNoAddress?: () => void;
  /** Options of the cache of prebuilt responses. */
  responseCache?: ResponseCacheOptions;
  /**
   * Build every representation and compressed variant in the background, one per macrotask, starting
   * `warmUp.delayMs` after start-up, so that later requests do not wait for them. Until then (and
   * without a warm-up) each is built by the first request that needs it.
   */
  warmUp?: WarmUpOptions;
}

/**
 * Builds the service's fetch handler.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadConfig, recordEnv } from "./config.ts";
 * import { policyOf } from "./limit/decision.ts";
 * import { MemoryStore } from "./limit/memory.ts";
 * import { loadContent } from "./pages/content.ts";
 * const loaded = loadConfig(recordEnv({}));
 * assert(loaded.ok);
 * const content = loadContent(loaded.config);
 * assert(content.ok);
 * const store = new MemoryStore(policyOf(loaded.config), { sweep: false });
 * const handler = createHandler({ config: loaded.config, content: content.content, store });
 * const response = await handler(new Request("http://localhost/api/v1/platform"), {
 *   remoteAddr: { hostname: "192.0.2.1" },
 * });
 * assert.equal(response.status, 200);
 * assert.equal(response.headers.get("ratelimit-remaining"), "59");
 * ```
 */
export function createHandler(options: HandlerOptions): ServiceHandler {
  const { store, now, templates, callerKeyOf, cache, choose, noDecision, record } = prepare(
    options,
  );
  const onError = options.onError;

  const answer = answerWith(cache, choose);
  const routeOf = lastRouteFirst(templates.routes);

  const handle = (
    request: Request,
    key: string,
    started: number,
    path: string,
  ): Response | Promise<Response> => {
    const route = routeOf(path);
    // A page's first request waits for the Markdown renderer to load (once per process).
    if (route !== undefined && !route.ready) {
      return route.prepare().then(() => handle(request, key, started, path));
    }
    const method = request.method;
    // The method first: a request that is not OPTIONS never asks for its headers here.
    if (method === "OPTIONS" && isCorsPreflight(method, request.headers)) {
      const preflight = (route ?? templates.unknownPath).preflight;
      const granted = preflightDecision(store.peek(key, started));
      return granted instanceof Promise
        ? granted.then((decision) => cache.respond(preflight, decision))
        : cache.respond(preflight, granted);
    }
    const decision = store.hit(key, started);
    return decision instanceof Promise
      ? decision.then((decided) => answer(request, route, decided))
      : answer(request, route, decision);
  };

  const fail = (error: unknown, request: Request): Response => {
    onError?.(error);
    const path = templates.routes.get(requestPathOf(request.url, request.headers.get("host"))) ??
      templates.unknownPath;
    return cache.respond(forMethod(path.internalError, request.method), noDecision);
  };

  const handler: Handler = (request, info) => {
    const started = now();
    const host = request.headers.get("host");
    const path = requestPathOf(request.url, host);
    let key = "";
    let result: Response | Promise<Response>;
    try {
      key = callerKeyOf(request.headers, info);
      result = handle(request, key, started, path);
    } catch (error) {
      result = fail(error, request);
    }
    if (result instanceof Promise) {
      return result.catch((error) => fail(error, request)).then((response) => {
        record?.(request.method, path, key, started, response.status, badHost(host, response));
        return response;
      });
    }
    record?.(request.method, path, key, started, result.status, badHost(host, result));
    return result;
  };
  return withReady(handler, templates);
}

/**
 * Whether `response` refused its request for its `Host` (the only 400 the service sends). The
 * handler logs the target's path (`requestPathOf`), not what a hostile `Host` makes of the URL
 * (lib/README.md, "Host").
 */
function badHost(host: string | null, response: Response): boolean {
  return response.status === 400 && host !== null && !isValidHost(host);
}

/**
 * A look-up in the route table that answers the path of the previous request without hashing:
 * nearly every request in a row names the same path, and a path read from a request is a new
 * string each time, whose hash the map would compute first.
 */
function lastRouteFirst(
  routes: ReadonlyMap<string, RouteTemplates>,
): (path: string) => RouteTemplates | undefined {
  let lastPath: string | undefined;
  let lastRoute: RouteTemplates | undefined;
  return (path) => {
    if (path === lastPath) return lastRoute;
    lastRoute = routes.get(path);
    lastPath = path;
    return lastRoute;
  };
}

/**
 * The response to a decided request. An unusual `Accept` or `Accept-Encoding` first waits for
 * negotiator (loaded once per process), and a Markdown representation not built yet for its build
 * (its tokens counted, `routes.ts`); then the request is chosen again with the same decision.
 */
function answerWith(
  cache: ResponseCache,
  choose: Chooser,
): (
  request: Request,
  route: RouteTemplates | undefined,
  decision: Decision,
) => Response | Promise<Response> {
  const answer = (
    request: Request,
    route: RouteTemplates | undefined,
    decision: Decision,
  ): Response | Promise<Response> => {
    try {
      return cache.respond(choose(request, route, decision), decision);
    } catch (error) {
      const until = error instanceof RepresentationPendingError
        ? error.until
        : error instanceof NegotiatorNotLoadedError
        ? loadNegotiator()
        : undefined;
      if (until === undefined) throw error;
      // Chosen again once ready: a Markdown representation may need negotiator next, or the reverse.
      return until.then(() => answer(request, route, decision));
    }
  };
  return answer;
}

/** `handler` with `ready`, which builds the eager routes when first read (see {@linkcode ServiceHandler}). */
function withReady(handler: Handler, templates: ServiceTemplates): ServiceHandler {
  let ready: Promise<void> | undefined;
  return Object.defineProperty(handler, "ready", {
    get: () => ready ??= prepareEagerRoutes(templates),
  }) as ServiceHandler;
}

/** Builds the representations of every route that needs no npm package; a failure is left to its path. */
function prepareEagerRoutes(templates: ServiceTemplates): Promise<void> {
  const eager = [...new Set(templates.routes.values())].filter((route) => route.eager);
  return Promise.all(eager.map((route) => route.prepareAll().catch(() => {}))).then(() => {});
}

/**
 * How long after start-up the warm-up begins by default, in ms: `WARM_UP_DELAY_MS` of
 * `warm_up.ts`, whose module is not imported before then (a test checks that the two agree).
 */
export const WARM_UP_DELAY = 500;

/**
 * Starts the warm-up (`warm_up.ts`) once its delay has passed, importing its module only then, so
 * that a cold start's first response does not wait for it to load (lib/README.md, "Cold start").
 */
function scheduleWarmUp(table: ReadonlyMap<string, Route>, options: WarmUpOptions): void {
  later(options.delayMs ?? WARM_UP_DELAY, () => {
    if (options.signal?.aborted) return;
    import("./warm_up.ts").then(
      ({ warmUp }) => warmUp(new Set(table.values()), { ...options, delayMs: 0 }),
      (error) => options.onError?.(error),
    );
  });
}

/** What {@linkcode createHandler} builds once, at start-up. */
interface Prepared {
  store: RateLimitStore;
  now: () => number;
  templates: ServiceTemplates;
  callerKeyOf: (headers: Pick<Headers, "get">, info: PeerInfo) => string;
  cache: ResponseCache;
  choose: Chooser;
  /** What a 500 reports when no decision was made. */
  noDecision: Decision;
  record: AccessRecorder | undefined;
}

/** Builds the route table, every template, the caller key, the response cache and the recorder. */
function prepare(options: HandlerOptions): Prepared {
  const { config, content } = options;
  const now = options.now ?? Date.now;
  const table = buildRoutes(config, content);
  const templates = buildServiceTemplates(config, { site: content.site, routes: table });
  if (options.warmUp) scheduleWarmUp(table, options.warmUp);
  return {
    store: options.store,
    now,
    templates,
    callerKeyOf: createCallerKey({
      trustedProxies: config.trustedProxies,
      forwardedHeader: config.forwardedHeader,
      ...(options.onNoAddress ? { onNoAddress: once(options.onNoAddress) } : {}),
    }),
    cache: createResponseCache(rateLimitConstants(policyOf(config)), options.responseCache),
    choose: createChooser(templates),
    noDecision: undecided(policyOf(config)),
    record: options.accessLog ? createAccessRecorder(options.accessLog, now) : undefined,
  };
}
