/**
 * The error renderer: every error response the service can send, each rendered once, when first
 * needed.
 *
 * Error bodies never echo request data, so each (code, media type) is rendered once; a path's error
 * responses then differ only in the path's own fields (`Link`, `Deprecation`...), added by
 * {@linkcode errorTemplates}.
 *
 * @module
 */

import type { Config } from "../config.ts";
import {
  errorCatalog,
  type ErrorCode,
  errorHtmlContent,
  errorJson,
  errorMarkdown,
} from "../errors.ts";
import type { HeaderField } from "../http/message.ts";
import { renderPage, type Site } from "../pages/layout.ts";
import { ALLOWED_METHODS, COMMON_FIELDS, HTML_FIELDS, TYPES } from "../routes.ts";
import { type ResponseTemplate, sendableBody } from "./response_cache.ts";

/** A response to GET (and every method but HEAD) and the same response to HEAD. */
export interface MethodTemplates {
  /** With the body. */
  readonly get: ResponseTemplate;
  /** Without the body, with its `Content-Length`. */
  readonly head: ResponseTemplate;
}

/** The media types an error is rendered in. */
export type ErrorMediaType = "json" | "markdown" | "html";

/** One rendered error: its status, body and fields, before any path's own fields. */
export interface RenderedError {
  /** HTTP status. */
  readonly status: number;
  /** The body, UTF-8. */
  readonly body: Uint8Array<ArrayBuffer>;
  /** Content type, caching and the fields of every response. */
  readonly fields: readonly HeaderField[];
}

/** Renders an error code in a media type. */
export type ErrorRenderer = (code: ErrorCode, type: ErrorMediaType) => RenderedError;

const ENCODER = new TextEncoder();

/**
 * The template of `pair` that answers `method`: HEAD's for HEAD, GET's for every other method.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const pair = {
 *   get: { status: 404, body: "{}", fields: [] },
 *   head: { status: 404, body: null, fields: [] },
 * } as const;
 * assert.equal(forMethod(pair, "HEAD"), pair.head);
 * assert.equal(forMethod(pair, "DELETE"), pair.get);
 * ```
 */
export function forMethod(pair: MethodTemplates, method: string): ResponseTemplate {
  return method === "HEAD" ? pair.head : pair.get;
}

/**
 * Creates the renderer of the service's errors for a configuration (its texts) and site (the HTML
 * layout).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadConfig, recordEnv } from "../config.ts";
 * const loaded = loadConfig(recordEnv({}));
 * assert(loaded.ok);
 * const site = { name: "Discovery", baseUrl: "http://localhost:8000", supportUrl: "mailto:api@example.com" };
 * const render = createErrorRenderer(loaded.config, site);
 * const error = render("method_not_allowed", "json");
 * assert.equal(error.status, 405);
 * assert.deepEqual(error.fields.at(-1), ["allow", "GET, HEAD, OPTIONS"]);
 * ```
 */
export function createErrorRenderer(config: Config, site: Site): ErrorRenderer {
  // Built with the first error rendered, not at start-up (lib/README.md, "Cold start").
  let catalog: ReturnType<typeof errorCatalog> | undefined;
  return (code, type) => {
    const info = (catalog ??= errorCatalog(config))[code];
    const body = type === "json"
      ? errorJson(code, info)
      : type === "markdown"
      ? errorMarkdown(code, info)
      : renderPage(errorHtmlContent(code, info), {
        path: "",
        title: `${info.title} · ${config.name}`,
        description: info.message,
      }, site);
    const fields: HeaderField[] = [
      ["content-type", TYPES[type]],
      ["cache-control", "no-store"],
      ...(type === "html" ? HTML_FIELDS : []),
      ...COMMON_FIELDS,
    ];
    if (code === "method_not_allowed") fields.push(["allow", ALLOWED_METHODS]);
    return { status: info.status, body: ENCODER.encode(body), fields };
  };
}

/**
 * The GET and HEAD templates of a rendered error, with `extra` fields (a path's own) after its own.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const error = { status: 404, body: new TextEncoder().encode("{}"), fields: [["content-type", "application/json"]] } as const;
 * const pair = errorTemplates(error, [["vary", "Accept"]]);
 * assert.equal(pair.get.body, "{}");
 * assert.deepEqual(pair.head.fields.at(-1), ["content-length", "2"]);
 * ```
 */
export function errorTemplates(
  error: RenderedError,
  extra: readonly HeaderField[],
): MethodTemplates {
  const fields = [...error.fields, ...extra];
  return {
    get: { status: error.status, body: sendableBody(error.body, false), fields },
    head: {
      status: error.status,
      body: null,
      fields: [...fields, ["content-length", String(error.body.length)]],
    },
  };
}
