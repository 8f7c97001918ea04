/**
 * The fetch handler: caller key -> rate-limit decision -> route -> representation -> response.
 *
 * Everything a response needs is built by `createHandler` at start-up; per request the handler does
 * map look-ups, one rate-limit decision and one `Headers` fill. Unexpected failures are caught here,
 * once, logged and answered 500 with the Error shape.
 *
 * @module
 */

import { callerKey, type PeerInfo, truncatedAddress } from "./caller.ts";
import type { Config } from "./config.ts";
import type { Content } from "./content.ts";
import {
  errorCatalog,
  type ErrorCode,
  errorHtmlContent,
  errorJson,
  errorMarkdown,
} from "./errors.ts";
import { ifNoneMatchMatches, pathOf, STATUS } from "./http.ts";
import { renderPage } from "./layout.ts";
import { memoize, preferredEncoding, preferredType } from "./negotiate.ts";
import {
  type Decision,
  policyHeader,
  type RateLimitStore,
  setRateLimitHeaders,
} from "./rate_limit.ts";
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
}

interface ErrorResponse {
  status: number;
  body: Uint8Array<ArrayBuffer>;
  fields: readonly HeaderField[];
}

const ENCODER = new TextEncoder();

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
  const routes = buildRoutes(config, content);
  const catalog = errorCatalog(config);
  const rateConstants = {
    policy: policyHeader({
      limit: config.rateLimit,
      windowMs: config.rateLimitWindowSeconds * 1000,
    }),
    limit: String(config.rateLimit),
  };
  const callerOptions = {
    trustedProxies: config.trustedProxies,
    forwardedHeader: config.forwardedHeader,
  };

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
  const notFound = {
    json: errorOf("not_found", "json"),
    markdown: errorOf("not_found", "markdown"),
    html: errorOf("not_found", "html"),
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
  const pickEncoding = memoize(preferredEncoding);
  const vary: HeaderField = ["vary", "Accept"];

  const respond = (
    status: number,
    body: Uint8Array<ArrayBuffer> | null,
    fields: readonly HeaderField[],
    decision: Decision | undefined,
    extra: readonly HeaderField[] = [],
  ): Response => {
    const headers = new Headers(fields as [string, string][]);
    for (const [name, value] of extra) headers.append(name, value);
    if (decision) setRateLimitHeaders(headers, decision, rateConstants);
    return new Response(body, { status, headers });
  };

  const error = (
    e: ErrorResponse,
    request: Request,
    decision: Decision | undefined,
    extra: readonly HeaderField[] = [],
  ): Response => {
    if (request.method === "HEAD") {
      return respond(e.status, null, e.fields, decision, [...extra, [
        "content-length",
        String(e.body.length),
      ]]);
    }
    return respond(e.status, e.body, e.fields, decision, extra);
  };

  // A preflight is never refused (it is not counted), so it carries no Retry-After.
  const preflight = (route: Route, decision: Decision): Response =>
    respond(STATUS.NoContent, null, COMMON_FIELDS, { ...decision, allowed: true }, [
      ["allow", ALLOWED_METHODS],
      ["access-control-allow-methods", ALLOWED_METHODS],
      ["access-control-allow-headers", "Accept, Accept-Encoding, If-None-Match"],
      ["access-control-max-age", "86400"],
      ...route.fields,
    ]);

  const answer = (request: Request, route: Route | undefined, decision: Decision): Response => {
    if (!decision.allowed) {
      const refusal = decision.unavailable ? rateLimitUnavailable : rateLimited;
      return error(refusal, request, decision, route?.fields);
    }
    const headers = request.headers;
    if (route === undefined) {
      return error(pickNotFound(headers.get("accept")), request, decision, [vary]);
    }
    const method = request.method;
    if (method === "GET" || method === "HEAD") {
      const variant =
        route.pick(headers.get("accept")).variants[pickEncoding(headers.get("accept-encoding"))];
      const ifNoneMatch = headers.get("if-none-match");
      if (ifNoneMatch !== null && ifNoneMatchMatches(ifNoneMatch, variant.etag)) {
        return respond(STATUS.NotModified, null, variant.notModifiedHeaders, decision);
      }
      if (method === "HEAD") {
        return respond(STATUS.OK, null, variant.headers, decision, [[
          "content-length",
          String(variant.body.length),
        ]]);
      }
      return respond(STATUS.OK, variant.body, variant.headers, decision);
    }
    if (method === "OPTIONS") return preflight(route, decision);
    return error(methodNotAllowed, request, decision, route.fields);
  };

  const handle = (
    request: Request,
    info: PeerInfo,
    started: number,
  ): Response | Promise<Response> => {
    const route = routes.get(pathOf(request.url));
    const key = callerKey(request.headers, info, callerOptions);
    const headers = request.headers;
    if (
      request.method === "OPTIONS" && headers.has("origin") &&
      headers.has("access-control-request-method")
    ) {
      // A CORS preflight is the browser asking permission, not the caller's request: never counted.
      const peeked = store.peek(key, started);
      const finish = (d: Decision) =>
        route
          ? preflight(route, d)
          : error(pickNotFound(headers.get("accept")), request, d, [vary]);
      return peeked instanceof Promise ? peeked.then(finish) : finish(peeked);
    }
    const decision = store.hit(key, started);
    return decision instanceof Promise
      ? decision.then((d) => answer(request, route, d))
      : answer(request, route, decision);
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
    return error(internalError, request, undecided, routes.get(pathOf(request.url))?.fields);
  };

  const accessLog = options.accessLog;
  const record = (request: Request, info: PeerInfo, started: number, status: number) => {
    if (!accessLog) return;
    const addr = info.remoteAddr;
    accessLog({
      time: new Date(started).toISOString(),
      method: request.method,
      path: pathOf(request.url),
      status,
      ms: Math.round((now() - started) * 1000) / 1000,
      caller: "hostname" in addr ? truncatedAddress(addr.hostname) : "unix",
    });
  };

  return (request, info) => {
    const started = now();
    let result: Response | Promise<Response>;
    try {
      result = handle(request, info, started);
    } catch (err) {
      result = fail(err, request);
    }
    if (result instanceof Promise) {
      return result.catch((err) => fail(err, request)).then((response) => {
        record(request, info, started, response.status);
        return response;
      });
    }
    record(request, info, started, result.status);
    return result;
  };
}
