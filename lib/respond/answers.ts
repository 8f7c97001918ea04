/**
 * A path's prebuilt answers: one object per path ({@linkcode PathAnswers}) holding every response it
 * can send (each representation in each coding, its 304, the preflight, the 405 and the errors),
 * each built the first time a request needs it, then kept, and the per-request choice among them
 * ({@linkcode createChooser}). `paths.ts` says which path serves what; the response cache clones the
 * answer chosen.
 *
 * Nothing is built before a request needs it (lib/README.md, "Cold start"), and nothing needed
 * later throws: an answer not built yet is a promise of it.
 *
 * @module
 */

import type { Config } from "../config/config.ts";
import type { Decision } from "../limit/core/decision.ts";
import {
  errorCatalog,
  type ErrorCode,
  errorHtmlContent,
  errorJson,
  errorMarkdown,
} from "../errors.ts";
import {
  createHostCheck,
  type HeaderField,
  ifNoneMatchMatches,
  namesNoHost,
  RECOGNISED_METHODS,
  requestPathOf,
  STATUS,
} from "../http/message.ts";
import { type Encoding, memoize, preferredEncoding, preferredType } from "../http/negotiate.ts";
import type { Representation, Variant } from "../http/representation.ts";
import { once } from "../once.ts";
import { renderPage, type Site } from "../pages/layout.ts";
import { type ResponseTemplate, sendableBody } from "./response_cache.ts";

/** The methods every path allows. */
export const ALLOWED_METHODS = "GET, HEAD, OPTIONS";

/** Fields on every response of the service. */
export const COMMON_FIELDS: readonly HeaderField[] = [
  ["x-content-type-options", "nosniff"],
  ["access-control-allow-origin", "*"],
  [
    "access-control-expose-headers",
    "RateLimit, RateLimit-Policy, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Retry-After, Link, Deprecation, Sunset, ETag, Content-Signal, x-markdown-tokens",
  ],
];

/** Fields of every HTML response: nothing runs, nothing loads from elsewhere, no framing. */
export const HTML_FIELDS: readonly HeaderField[] = [
  [
    "content-security-policy",
    "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  ],
  ["referrer-policy", "no-referrer"],
];

/** Media types, with the parameters the service sends. */
export const TYPES = {
  json: "application/json",
  markdown: "text/markdown; charset=utf-8",
  html: "text/html; charset=utf-8",
  text: "text/plain; charset=utf-8",
  css: "text/css; charset=utf-8",
  svg: "image/svg+xml",
  linkset: 'application/linkset+json; profile="https://www.rfc-editor.org/info/rfc9727"',
  xml: "application/xml; charset=utf-8",
} as const;

/**
 * What a CORS preflight is granted, on every path, known or not: the methods of the service and the
 * request fields a page may send (negotiation and revalidation), remembered for a day.
 */
export const CORS_ALLOW_FIELDS: readonly HeaderField[] = [
  ["access-control-allow-methods", ALLOWED_METHODS],
  ["access-control-allow-headers", "Accept, Accept-Encoding, If-None-Match"],
  ["access-control-max-age", "86400"],
];

/** A response to GET (and every method but HEAD), and the same to HEAD: no body, its length. */
export interface GetAndHead {
  readonly get: ResponseTemplate;
  readonly head: ResponseTemplate;
}

/** One representation in one content coding: its 200s, and its 304 when `etag` matches. */
export interface VariantAnswers extends GetAndHead {
  readonly etag: string;
  readonly notModified: ResponseTemplate;
}

/** The answers of a path that no representation changes (an unknown path has these only). */
export interface FixedAnswers {
  /** 204 to OPTIONS and to a CORS preflight. */
  readonly preflight: ResponseTemplate;
  /** 405 to a recognised method but GET, HEAD and OPTIONS (`RECOGNISED_METHODS`). */
  readonly methodNotAllowed: ResponseTemplate;
  /** 501 to a method the service does not recognise, on every path. */
  readonly notImplemented: ResponseTemplate;
  /** 400: the `Host` field is missing or not a valid host, or the runtime could not read the head. */
  readonly badRequest: GetAndHead;
  /** 408: the head did not arrive in time (Node's entry: lib/node/http1/client_error.ts). */
  readonly requestTimeout: GetAndHead;
  /** 403 `forbidden`: the caller's address is in `RATE_LIMIT_DENY`. */
  readonly forbidden: GetAndHead;
  /** 429: the caller's quota is spent. */
  readonly rateLimited: GetAndHead;
  /** 429 `rate_limit_unavailable`: the store could not decide and the policy refused. */
  readonly unavailable: GetAndHead;
  /** 500: an unexpected failure. */
  readonly internalError: GetAndHead;
}

/** Every answer of the service. */
export interface Answers {
  /** Each known path's, by exact path (case-sensitive, no trailing slash). */
  readonly paths: ReadonlyMap<string, PathAnswers>;
  /** An unknown path's preflight and errors. */
  readonly unknown: FixedAnswers;
  /** An unknown path's 404 in the media type `Accept` prefers (a promise: see `PathAnswers.variant`). */
  notFound(accept: string | null): GetAndHead | Promise<GetAndHead>;
}

/** Every answer of one known path. */
export interface PathAnswers {
  /** Its preflight, 405 and errors (shared by the paths without header fields of their own). */
  readonly fixed: FixedAnswers;
  /**
   * The variant `Accept` and `Accept-Encoding` select; a promise of it while it is being built (the
   * path's first request, a Markdown representation's token count) or while the header needs
   * `npm:negotiator`, not loaded yet.
   */
  variant(
    accept: string | null,
    acceptEncoding: string | null,
  ): VariantAnswers | Promise<VariantAnswers>;
  /** Builds every representation of the path, once (the handler's `prepare()`, the warm-up). */
  prepare(): Promise<void>;
  /** The representations built so far (the warm-up compresses them). */
  representations(): Representation[];
  /** Whether the handler's `prepare()` builds it: all but the pages, which may import `marked`. */
  readonly eager: boolean;
}

/** A representation, built when first needed: its content comes from `make`. */
export interface Lazy {
  /** The media type it is offered as in negotiation (without parameters). */
  readonly type: string;
  /** Builds it, once. */
  readonly make: () => Promise<Representation>;
}

/** A representation with its variants' answers (br and gzip once asked for after compression). */
type Built = { representation: Representation } & { [E in Encoding]?: VariantAnswers };

/** The answers of one variant. */
export function variantAnswers(variant: Variant): VariantAnswers {
  const encoded = variant.headers.some(([name]) => name === "content-encoding");
  return {
    etag: variant.etag,
    get: { status: STATUS.OK, body: sendableBody(variant.body, encoded), fields: variant.headers },
    head: {
      status: STATUS.OK,
      body: null,
      fields: [...variant.headers, ["content-length", String(variant.body.length)]],
    },
    notModified: { status: STATUS.NotModified, body: null, fields: variant.notModifiedHeaders },
  };
}

/** The answers of `built` in `encoding`: the identity ones until that coding is compressed. */
function coded(built: Built, encoding: Encoding): VariantAnswers {
  const variant = built.representation.variants[encoding];
  const identity = built.identity!;
  if (variant === undefined) return identity;
  return built[encoding] = variant === built.representation.variants.identity
    ? identity
    : variantAnswers(variant);
}

/** The coding an `Accept-Encoding` value selects (memoised, shared by every path). */
const pickEncoding = memoize(preferredEncoding);

/**
 * The answers of one path: `offered` (the default representation first) chosen by `Accept`, and
 * `fixed`; `before` runs once before any representation is built (a page's Markdown renderer).
 */
export function pathAnswers(
  offered: readonly [Lazy, ...Lazy[]],
  fixed: FixedAnswers,
  before?: () => Promise<void>,
): PathAnswers {
  const built: (Built | undefined)[] = offered.map(() => undefined);
  const builds = offered.map((lazy, index) =>
    once(async () => {
      await before?.();
      built[index] = { representation: await lazy.make() };
      built[index]!.identity = variantAnswers(built[index]!.representation.variants.identity);
    })
  );
  const types = offered.map((lazy) => lazy.type) as [string, ...string[]];
  const indexOf = offered.length === 1 ? () => 0 : memoize((accept) => {
    const type = preferredType(accept, types);
    return type instanceof Promise ? type.then((t) => types.indexOf(t)) : types.indexOf(type);
  });
  const variant: PathAnswers["variant"] = (accept, acceptEncoding) => {
    const index = indexOf(accept);
    if (index instanceof Promise) return index.then(() => variant(accept, acceptEncoding));
    const answers = built[index];
    if (answers === undefined) return builds[index]!().then(() => variant(accept, acceptEncoding));
    const encoding = pickEncoding(acceptEncoding);
    if (encoding instanceof Promise) return encoding.then(() => variant(accept, acceptEncoding));
    return answers[encoding] ?? coded(answers, encoding);
  };
  return {
    fixed,
    variant,
    prepare: once(() => Promise.all(builds.map((build) => build())).then(() => {})),
    representations: () => built.flatMap((answers) => answers ? [answers.representation] : []),
    eager: before === undefined,
  };
}

/** The media types an error is rendered in. */
export type ErrorMediaType = "json" | "markdown" | "html";

/** Renders an error code in a media type, with a path's own `fields` after the error's. */
export type ErrorRenderer = (
  code: ErrorCode,
  type: ErrorMediaType,
  fields?: readonly HeaderField[],
) => GetAndHead;

const ENCODER = new TextEncoder();

/**
 * Creates the renderer of the service's errors for a configuration (its texts) and site (the HTML
 * layout). Error bodies never echo the request, so each path renders each error once.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadConfig } from "../config/config.ts";
 * import { recordEnv } from "../config/env.ts";
 * const loaded = loadConfig(recordEnv({}));
 * assert(loaded.ok);
 * const site = { name: "Discovery", baseUrl: "http://localhost:8000", supportUrl: "mailto:api@example.com" };
 * const render = createErrorRenderer(loaded.config, site);
 * const error = render("method_not_allowed", "json", [["link", "<x>"]]);
 * assert.equal(error.get.status, 405);
 * assert.deepEqual(error.get.fields.slice(-2), [["allow", "GET, HEAD, OPTIONS"], ["link", "<x>"]]);
 * assert.equal(error.head.body, null);
 * ```
 */
export function createErrorRenderer(config: Config, site: Site): ErrorRenderer {
  // Built with the first error rendered, not at start-up (lib/README.md, "Cold start").
  let catalog: ReturnType<typeof errorCatalog> | undefined;
  return (code, type, extra = []) => {
    const info = (catalog ??= errorCatalog(config))[code];
    const body = ENCODER.encode(
      type === "json"
        ? errorJson(code, info)
        : type === "markdown"
        ? errorMarkdown(code, info)
        : renderPage(errorHtmlContent(code, info), {
          path: "",
          title: `${info.title} · ${config.name}`,
          description: info.message,
        }, site),
    );
    const fields: HeaderField[] = [
      ["content-type", TYPES[type]],
      ["cache-control", "no-store"],
      ...(type === "html" ? HTML_FIELDS : []),
      ...COMMON_FIELDS,
      ...(code === "method_not_allowed" ? [["allow", ALLOWED_METHODS] as const] : []),
      ...extra,
    ];
    return {
      get: { status: info.status, body: sendableBody(body, false), fields },
      head: {
        status: info.status,
        body: null,
        fields: [...fields, ["content-length", String(body.length)]],
      },
    };
  };
}

/** The fixed answers of a path with `fields` of its own (none for an unknown path), each built when first read. */
export function fixedAnswers(render: ErrorRenderer, fields: readonly HeaderField[]): FixedAnswers {
  const preflight = once((): ResponseTemplate => ({
    status: STATUS.NoContent,
    body: null,
    fields: [...COMMON_FIELDS, ["allow", ALLOWED_METHODS], ...CORS_ALLOW_FIELDS, ...fields],
  }));
  const methodNotAllowed = once(() => render("method_not_allowed", "json", fields).get);
  const notImplemented = once(() => render("not_implemented", "json", fields).get);
  const badRequest = once(() => render("bad_request", "json", fields));
  const requestTimeout = once(() => render("request_timeout", "json", fields));
  const forbidden = once(() => render("forbidden", "json", fields));
  const rateLimited = once(() => render("rate_limited", "json", fields));
  const unavailable = once(() => render("rate_limit_unavailable", "json", fields));
  const internalError = once(() => render("internal_error", "json", fields));
  return {
    get preflight() {
      return preflight();
    },
    get methodNotAllowed() {
      return methodNotAllowed();
    },
    get notImplemented() {
      return notImplemented();
    },
    get badRequest() {
      return badRequest();
    },
    get requestTimeout() {
      return requestTimeout();
    },
    get forbidden() {
      return forbidden();
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

/** The media types a 404 is offered in, the default first. */
const NOT_FOUND_TYPES = ["application/json", "text/markdown", "text/html"] as const;
const NOT_FOUND_RENDERING = {
  "application/json": "json",
  "text/markdown": "markdown",
  "text/html": "html",
} as const;

/** Options of {@linkcode notFoundAnswers}. */
export interface NotFoundOptions {
  /** The Markdown 404's own header fields (its token count), added once they resolve. */
  markdownFields?: () => Promise<readonly HeaderField[]>;
}

/**
 * The Markdown 404, rendered once: with `fields` once they resolve (a promise until then), after
 * that without one.
 */
function markdownAnswer(
  render: ErrorRenderer,
  vary: readonly HeaderField[],
  fields: NotFoundOptions["markdownFields"],
): () => GetAndHead | Promise<GetAndHead> {
  if (fields === undefined) return once(() => render("not_found", "markdown", vary));
  let rendered: GetAndHead | undefined;
  const rendering = once(() =>
    fields().then((own) => rendered = render("not_found", "markdown", [...vary, ...own]))
  );
  return () => rendered ?? rendering();
}

/**
 * The 404 of an unknown path in the media type `Accept` prefers (memoised; a promise while the
 * value needs `npm:negotiator`, not loaded yet).
 */
export function notFoundAnswers(
  render: ErrorRenderer,
  options: NotFoundOptions = {},
): (accept: string | null) => GetAndHead | Promise<GetAndHead> {
  const vary: readonly HeaderField[] = [["vary", "Accept"]];
  const byType = {
    json: once(() => render("not_found", "json", vary)),
    markdown: markdownAnswer(render, vary, options.markdownFields),
    html: once(() => render("not_found", "html", vary)),
  };
  const answer = (type: typeof NOT_FOUND_TYPES[number]) => byType[NOT_FOUND_RENDERING[type]]();
  return memoize((accept) => {
    const type = preferredType(accept, NOT_FOUND_TYPES);
    return type instanceof Promise ? type.then(answer) : answer(type);
  });
}

/** Picks the answer of a request on `path` (`undefined`: an unknown path) after `decision`. */
export type Chooser = (
  request: Pick<Request, "method" | "headers" | "url">,
  path: PathAnswers | undefined,
  decision: Decision,
) => ResponseTemplate | Promise<ResponseTemplate>;

/** Options of {@linkcode createChooser}. */
export interface ChooserOptions {
  /**
   * The address the service listens on (`HOSTNAME`), where requests come from the runtime's own
   * HTTP server (Deno's and Node's entries): a request that named no host is then answered 400
   * (`namesNoHost`, RFC 9112 section 3.2). Unset (Workers, a `Request` built in code), a request
   * without `Host` is answered as any other.
   */
  listenHostname?: string;
}

/** HEAD's answer of `pair` for HEAD, GET's for every other method. */
export function forMethod(pair: GetAndHead, method: string): ResponseTemplate {
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
 * Creates the per-request choice over the service's answers (it remembers the last valid `Host`):
 * a refused request gets its 429; a missing or invalid `Host` its 400 (RFC 9112 section 3.2); GET
 * and HEAD the variant that `Accept` and `Accept-Encoding` select, or its 304 when `If-None-Match`
 * matches, or on an unknown path its 404 in the preferred media type; a method the service does not
 * recognise its 501; an unknown path its 404, but `OPTIONS *` (which the runtime hands over as the
 * path `/*`) the server's 204; OPTIONS its 204; any other method its 405.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadConfig } from "../config/config.ts";
 * import { recordEnv } from "../config/env.ts";
 * import { DISK_STATIC_FILES } from "../server/static_files.ts";
 * import { loadContent } from "../pages/content.ts";
 * import { buildAnswers } from "./paths.ts";
 * const loaded = loadConfig(recordEnv({}));
 * assert(loaded.ok);
 * const content = loadContent(loaded.config, DISK_STATIC_FILES);
 * assert(content.ok);
 * const answers = buildAnswers(loaded.config, content.content);
 * const choose = createChooser(answers);
 * const admitted = { allowed: true, remaining: 59, resetSeconds: 60 };
 * const request = new Request("http://localhost/x", { method: "DELETE" });
 * assert.equal((await choose(request, answers.paths.get("/llms.txt"), admitted)).status, 405);
 * assert.equal((await choose(request, undefined, admitted)).status, 404);
 * const unknownMethod = new Request("http://localhost/x", { method: "FOO" });
 * assert.equal((await choose(unknownMethod, undefined, admitted)).status, 501);
 * ```
 */
export function createChooser(answers: Answers, options: ChooserOptions = {}): Chooser {
  const hostIsValid = createHostCheck();
  const listen = options.listenHostname;
  const notFound = (method: string, accept: string | null) => {
    const pair = answers.notFound(accept);
    return pair instanceof Promise
      ? pair.then((built) => forMethod(built, method))
      : forMethod(pair, method);
  };
  return (request, path, decision) => {
    const method = request.method;
    const fixed = path === undefined ? answers.unknown : path.fixed;
    if (!decision.allowed) {
      return forMethod(decision.unavailable ? fixed.unavailable : fixed.rateLimited, method);
    }
    const headers = request.headers;
    const host = headers.get("host");
    // Without `Host`, the URL is read only where the entry said it comes from a listener of its own.
    if (
      host === null ? listen !== undefined && namesNoHost(request.url, listen) : !hostIsValid(host)
    ) {
      return forMethod(fixed.badRequest, method);
    }
    if (method === "GET" || method === "HEAD") {
      if (path === undefined) return notFound(method, headers.get("accept"));
      const variant = path.variant(headers.get("accept"), headers.get("accept-encoding"));
      return variant instanceof Promise
        ? variant.then((built) => variantResponse(request, built))
        : variantResponse(request, variant);
    }
    if (!RECOGNISED_METHODS.has(method)) return fixed.notImplemented;
    if (path === undefined) {
      // RFC 9110 section 9.3.7: `OPTIONS *` asks about the server, not a resource.
      if (method === "OPTIONS" && requestPathOf(request.url, host) === "/*") return fixed.preflight;
      return notFound(method, headers.get("accept"));
    }
    return method === "OPTIONS" ? fixed.preflight : fixed.methodNotAllowed;
  };
}
