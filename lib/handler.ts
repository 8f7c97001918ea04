/**
 * The fetch handler: caller key -> rate-limit decision -> route -> representation -> response.
 *
 * Everything a response needs is built by `createHandler` at start-up: every status, body and field
 * set the service can answer is a {@linkcode ResponseTemplate}. Per request the handler does map
 * look-ups and one rate-limit decision, and answers a clone of a prebuilt response for that template
 * and decision (`response_cache.ts`). Unexpected failures are caught here, once, logged and answered
 * 500 with the Error shape.
 *
 * @module
 */

import {
  createCallerKey,
  NO_ADDRESS_KEY,
  type PeerInfo,
  truncatedAddress,
} from "./limit/caller.ts";
import type { Config } from "./config.ts";
import type { Content } from "./pages/content.ts";
import {
  errorCatalog,
  type ErrorCode,
  errorHtmlContent,
  errorJson,
  errorMarkdown,
} from "./errors.ts";
import { ifNoneMatchMatches, isValidHost, pathOf, STATUS } from "./http/message.ts";
import { renderPage } from "./pages/layout.ts";
import { type Encoding, memoize, preferredEncoding, preferredType } from "./http/negotiate.ts";
import {
  type Decision,
  policyOf,
  rateLimitConstants,
  type RateLimitStore,
} from "./limit/decision.ts";
import type { Representation, Variant } from "./http/representation.ts";
import {
  createResponseCache,
  type ResponseCacheOptions,
  type ResponseTemplate,
  sendableBody,
} from "./respond/response_cache.ts";
import {
  ALLOWED_METHODS,
  buildRoutes,
  COMMON_FIELDS,
  type HeaderField,
  HTML_FIELDS,
  type Route,
  TYPES,
} from "./routes.ts";

/** One access-log record: never the query string, a body, or a full client address. */
export interface AccessRecord {
  /** ISO 8601 time the request arrived. */
  time: string;
  /** Request method. */
  method: string;
  /** Request path without query string. */
  path: string;
  /** Response status. */
  status: number;
  /** Milliseconds spent in the handler. */
  ms: number;
  /** The caller's address truncated to /24 (IPv4) or /48 (IPv6). */
  caller: string;
}

/** Options of the warm-up of {@linkcode HandlerOptions}. */
export interface WarmUpOptions {
  /**
   * How long after start-up the warm-up begins, in ms (default {@linkcode WARM_UP_DELAY_MS}). Each
   * step runs on the event loop (brotli has no off-thread form in Deno): a request arriving during a
   * step waits for it, so the steps wait until the first requests of a cold start are answered.
   */
  delayMs?: number;
  /** Called once every variant is built, with how many were built and the ms it took in all. */
  onDone?: (report: { variants: number; ms: number }) => void;
  /** Receives a failure to build a representation; the warm-up goes on with the next one. */
  onError?: (error: unknown) => void;
  /** Stops the warm-up after the step under way (the service is shutting down); `onDone` is not called. */
  signal?: AbortSignal;
}

/** Default delay of the warm-up: a cold start's first requests are answered before it begins. */
export const WARM_UP_DELAY_MS = 500;

/** A fetch handler as `Deno.serve` calls it. */
export type Handler = (request: Request, info: PeerInfo) => Response | Promise<Response>;

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

interface ErrorResponse {
  status: number;
  body: Uint8Array<ArrayBuffer>;
  fields: readonly HeaderField[];
}

/** An error's response to GET (and every method but HEAD) and to HEAD. */
interface ErrorTemplates {
  get: ResponseTemplate;
  head: ResponseTemplate;
}

/** The responses of one variant (representation in one coding). */
interface VariantTemplates {
  etag: string;
  ok: ResponseTemplate;
  head: ResponseTemplate;
  notModified: ResponseTemplate;
}

/**
 * The templates of one representation per coding. A coding's templates are built the first time a
 * request asks for it (compressing then, see `representation.ts`) and kept in a plain field: every
 * later request reads the field, nothing else.
 */
interface VariantSet {
  identity: VariantTemplates;
  br: VariantTemplates | undefined;
  gzip: VariantTemplates | undefined;
  readonly representation: Representation;
}

/** Every response of one path, built at start-up. */
interface RouteTemplates {
  /** Whether the route's representations can be built (see `Route.prepare`). */
  ready: boolean;
  /** Makes the route ready. */
  prepare: () => Promise<void>;
  /** The variants of the representation an `Accept` value selects (memoised). */
  pick: (accept: string | null) => VariantSet;
  preflight: ResponseTemplate;
  methodNotAllowed: ResponseTemplate;
  badRequest: ErrorTemplates;
  rateLimited: ErrorTemplates;
  /** The refusal when the store could not decide (`Decision.unavailable`). */
  unavailable: ErrorTemplates;
  internalError: ErrorTemplates;
}

const ENCODER = new TextEncoder();

/**
 * What a CORS preflight is granted, on every path, known or not: the methods of the service and the
 * request fields a page may send (negotiation and revalidation), remembered for a day.
 */
const CORS_ALLOW_FIELDS: readonly HeaderField[] = [
  ["access-control-allow-methods", ALLOWED_METHODS],
  ["access-control-allow-headers", "Accept, Accept-Encoding, If-None-Match"],
  ["access-control-max-age", "86400"],
];

/**
 * Builds the service's fetch handler.
 *
 * @example
 * ```ts
 * const handler = createHandler({ config, content, store: new MemoryStore(policy) });
 * Deno.serve(handler);
 * ```
 */
export function createHandler(options: HandlerOptions): Handler {
  const { config, content, store } = options;
  const now = options.now ?? Date.now;
  const catalog = errorCatalog(config);
  const cache = createResponseCache(
    rateLimitConstants(policyOf(config)),
    options.responseCache,
  );
  let toldNoAddress = false;
  const onNoAddress = options.onNoAddress;
  const callerKey = createCallerKey({
    trustedProxies: config.trustedProxies,
    forwardedHeader: config.forwardedHeader,
    ...(onNoAddress
      ? {
        onNoAddress: () => {
          if (toldNoAddress) return;
          toldNoAddress = true;
          onNoAddress();
        },
      }
      : {}),
  });

  const errorOf = (code: ErrorCode, type: "json" | "markdown" | "html"): ErrorResponse => {
    const info = catalog[code];
    const body = type === "json"
      ? errorJson(code, info)
      : type === "markdown"
      ? errorMarkdown(code, info)
      : renderPage(errorHtmlContent(code, info), {
        path: "",
        title: `${info.title} · ${config.name}`,
        description: info.message,
      }, content.site);
    const fields: HeaderField[] = [
      ["content-type", TYPES[type]],
      ["cache-control", "no-store"],
      ...(type === "html" ? HTML_FIELDS : []),
      ...COMMON_FIELDS,
    ];
    if (code === "method_not_allowed") fields.push(["allow", ALLOWED_METHODS]);
    return { status: info.status, body: ENCODER.encode(body), fields };
  };
  const errorTemplates = (e: ErrorResponse, extra: readonly HeaderField[]): ErrorTemplates => ({
    get: { status: e.status, body: sendableBody(e.body, false), fields: [...e.fields, ...extra] },
    head: {
      status: e.status,
      body: null,
      fields: [...e.fields, ...extra, ["content-length", String(e.body.length)]],
    },
  });

  const vary: HeaderField = ["vary", "Accept"];
  const notFound = {
    json: errorTemplates(errorOf("not_found", "json"), [vary]),
    markdown: errorTemplates(errorOf("not_found", "markdown"), [vary]),
    html: errorTemplates(errorOf("not_found", "html"), [vary]),
  };
  const pickNotFound = memoize((accept) =>
    notFound[
      ({ "application/json": "json", "text/markdown": "markdown", "text/html": "html" } as const)[
        preferredType(accept, ["application/json", "text/markdown", "text/html"])
      ]
    ]
  );
  const methodNotAllowed = errorOf("method_not_allowed", "json");
  const rateLimited = errorOf("rate_limited", "json");
  const rateLimitUnavailable = errorOf("rate_limit_unavailable", "json");
  const internalError = errorOf("internal_error", "json");
  const badRequest = errorOf("bad_request", "json");
  const unknownBadRequest = errorTemplates(badRequest, []);
  const unknownRateLimited = errorTemplates(rateLimited, []);
  const unknownUnavailable = errorTemplates(rateLimitUnavailable, []);
  const unknownInternalError = errorTemplates(internalError, []);
  const pickEncoding = memoize(preferredEncoding);

  // Templates are built once per variant (codings that do not compress share one): their identity
  // is the response cache's key.
  const byVariant = new Map<Variant, VariantTemplates>();
  const templatesOfVariant = (variant: Variant): VariantTemplates => {
    let built = byVariant.get(variant);
    if (built === undefined) {
      built = {
        etag: variant.etag,
        ok: {
          status: STATUS.OK,
          body: sendableBody(
            variant.body,
            variant.headers.some(([name]) => name === "content-encoding"),
          ),
          fields: variant.headers,
        },
        head: {
          status: STATUS.OK,
          body: null,
          fields: [...variant.headers, ["content-length", String(variant.body.length)]],
        },
        notModified: { status: STATUS.NotModified, body: null, fields: variant.notModifiedHeaders },
      };
      byVariant.set(variant, built);
    }
    return built;
  };
  const variantsOf = (representation: Representation): VariantSet => ({
    identity: templatesOfVariant(representation.variants.identity),
    br: undefined,
    gzip: undefined,
    representation,
  });
  const coded = (set: VariantSet, encoding: Encoding): VariantTemplates =>
    set[encoding] = templatesOfVariant(set.representation.variants[encoding]);
  const templatesOf = (route: Route): RouteTemplates => ({
    ready: route.prepare === undefined,
    async prepare() {
      await route.prepare?.();
      this.ready = true;
    },
    pick: memoize((accept) => variantsOf(route.pick(accept))),
    preflight: {
      status: STATUS.NoContent,
      body: null,
      fields: [...COMMON_FIELDS, ["allow", ALLOWED_METHODS], ...CORS_ALLOW_FIELDS, ...route.fields],
    },
    methodNotAllowed: errorTemplates(methodNotAllowed, route.fields).get,
    badRequest: errorTemplates(badRequest, route.fields),
    rateLimited: errorTemplates(rateLimited, route.fields),
    unavailable: errorTemplates(rateLimitUnavailable, route.fields),
    internalError: errorTemplates(internalError, route.fields),
  });
  // A preflight to an unknown path is granted like any other, so that the page's real request goes
  // on and can read the JSON 404; it has no route fields (Link...) to add.
  const unknownPreflight: ResponseTemplate = {
    status: STATUS.NoContent,
    body: null,
    fields: [...COMMON_FIELDS, ["allow", ALLOWED_METHODS], ...CORS_ALLOW_FIELDS],
  };
  const routes = new Map<string, RouteTemplates>();
  const table = buildRoutes(config, content);
  for (const [path, route] of table) routes.set(path, templatesOf(route));
  if (options.warmUp) warmUp(new Set(table.values()), options.warmUp);

  // The 204 of OPTIONS: for a plain OPTIONS the decision was admitted; a preflight is never refused.
  const preflight = (route: RouteTemplates | undefined, decision: Decision): Response =>
    cache.respond(route ? route.preflight : unknownPreflight, decision);

  // Nearly every request names the same host: remember the last valid one.
  let lastValidHost = "";
  const answer = (
    request: Request,
    method: string,
    route: RouteTemplates | undefined,
    decision: Decision,
  ): Response => {
    if (!decision.allowed) {
      const refused = decision.unavailable
        ? route ? route.unavailable : unknownUnavailable
        : route
        ? route.rateLimited
        : unknownRateLimited;
      return cache.respond(method === "HEAD" ? refused.head : refused.get, decision);
    }
    const headers = request.headers;
    const host = headers.get("host");
    if (host !== null && host !== lastValidHost) {
      if (!isValidHost(host)) {
        const refused = route ? route.badRequest : unknownBadRequest;
        return cache.respond(method === "HEAD" ? refused.head : refused.get, decision);
      }
      lastValidHost = host;
    }
    if (route === undefined) {
      const missing = pickNotFound(headers.get("accept"));
      return cache.respond(method === "HEAD" ? missing.head : missing.get, decision);
    }
    if (method === "GET" || method === "HEAD") {
      const set = route.pick(headers.get("accept"));
      const encoding = pickEncoding(headers.get("accept-encoding"));
      const variant = set[encoding] ?? coded(set, encoding);
      const ifNoneMatch = headers.get("if-none-match");
      if (ifNoneMatch !== null && ifNoneMatchMatches(ifNoneMatch, variant.etag)) {
        return cache.respond(variant.notModified, decision);
      }
      return cache.respond(method === "HEAD" ? variant.head : variant.ok, decision);
    }
    if (method === "OPTIONS") return preflight(route, decision);
    return cache.respond(route.methodNotAllowed, decision);
  };

  const handle = (
    request: Request,
    key: string,
    started: number,
    path: string,
  ): Response | Promise<Response> => {
    const route = routes.get(path);
    // A page's first request waits for the Markdown renderer to load (once per process).
    if (route !== undefined && !route.ready) {
      return route.prepare().then(() => handle(request, key, started, path));
    }
    const headers = request.headers;
    const method = request.method;
    if (
      method === "OPTIONS" && headers.has("origin") && headers.has("access-control-request-method")
    ) {
      // A CORS preflight is the browser asking permission, not the caller's request: never counted.
      const peeked = store.peek(key, started);
      // Nor is it ever refused, so its answer carries no Retry-After, whatever the path.
      const finish = (peek: Decision) => {
        return preflight(route, peek.allowed ? peek : { ...peek, allowed: true });
      };
      return peeked instanceof Promise ? peeked.then(finish) : finish(peeked);
    }
    const decision = store.hit(key, started);
    return decision instanceof Promise
      ? decision.then((d) => answer(request, method, route, d))
      : answer(request, method, route, decision);
  };

  // A failure may come before any rate-limit decision: report the policy with nothing known to be
  // left, so that clients slow down rather than speed up. Not a 429, so no Retry-After.
  const undecided: Decision = {
    allowed: true,
    remaining: 0,
    resetSeconds: config.rateLimitWindowSeconds,
  };
  const fail = (err: unknown, request: Request): Response => {
    options.onError?.(err);
    const failed = routes.get(pathOf(request.url))?.internalError ?? unknownInternalError;
    return cache.respond(request.method === "HEAD" ? failed.head : failed.get, undecided);
  };

  const accessLog = options.accessLog;
  // Per request, the log needs the time as ISO 8601 and the truncated caller: both are remembered,
  // the time for the millisecond (tens of requests share one under load), the caller per address.
  let isoMs = Number.NaN;
  let iso = "";
  const isoOf = (ms: number): string => {
    if (ms !== isoMs) {
      isoMs = ms;
      iso = new Date(ms).toISOString();
    }
    return iso;
  };
  // The caller is logged as the rate limit saw it (behind trusted proxies, the client, not the
  // proxy), truncated: keys are an IPv4 address or an IPv6 /64 written as "xxxx:...::/64".
  const truncated = memoize((key) => truncatedAddress((key ?? "").replace(/\/64$/, "")));
  const record = (
    request: Request,
    key: string,
    started: number,
    path: string,
    status: number,
  ) => {
    if (!accessLog) return;
    accessLog({
      time: isoOf(started),
      method: request.method,
      path,
      status,
      ms: Math.round((now() - started) * 1000) / 1000,
      caller: key === NO_ADDRESS_KEY ? NO_ADDRESS_KEY : truncated(key),
    });
  };

  return (request, info) => {
    const started = now();
    const path = pathOf(request.url);
    let key = "";
    let result: Response | Promise<Response>;
    try {
      key = callerKey(request.headers, info);
      result = handle(request, key, started, path);
    } catch (err) {
      result = fail(err, request);
    }
    if (result instanceof Promise) {
      return result.catch((err) => fail(err, request)).then((response) => {
        record(request, key, started, path, response.status);
        return response;
      });
    }
    record(request, key, started, path, result.status);
    return result;
  };
}

/**
 * Builds every representation of `routes` and its compressed variants, one step per macrotask so
 * that requests arriving meanwhile are answered between steps.
 */
function warmUp(routes: Iterable<Route>, options: WarmUpOptions): void {
  const steps: Array<() => void> = [];
  let variants = 0;
  const compress = (representation: Representation, encoding: "br" | "gzip") => () => {
    void representation.variants[encoding];
    variants++;
  };
  for (const route of routes) {
    steps.push(() => {
      for (const representation of route.representations()) {
        variants++;
        steps.push(compress(representation, "br"), compress(representation, "gzip"));
      }
    });
  }
  let started = 0;
  const next = () => {
    if (options.signal?.aborted) return;
    const step = steps.shift();
    if (step === undefined) {
      options.onDone?.({ variants, ms: performance.now() - started });
      return;
    }
    try {
      step();
    } catch (error) {
      options.onError?.(error);
    }
    setTimeout(next, 0);
  };
  // Pages need the Markdown renderer: load it first (a failure is reported by each page's step).
  const prepare = () => Promise.all([...routes].map((route) => route.prepare?.().catch(() => {})));
  setTimeout(() => {
    started = performance.now();
    void prepare().then(next);
  }, options.delayMs ?? WARM_UP_DELAY_MS);
}
