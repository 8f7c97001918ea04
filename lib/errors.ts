/**
 * The service's errors: stable codes, their messages, and their bodies in JSON, Markdown and HTML.
 *
 * Bodies never echo request data (path, headers), so they are built once at start-up and cannot
 * reflect anything a caller sends.
 *
 * @module
 */

import type { Config } from "./config/config.ts";
import { escapeHtml } from "./pages/layout.ts";
import { STATUS } from "./http/message.ts";

/**
 * The stable error codes. Adding one is a change of the public contract (README.md's error codes and
 * the OpenAPI document).
 */
export type ErrorCode =
  | "bad_request"
  | "forbidden"
  | "not_found"
  | "method_not_allowed"
  | "request_timeout"
  | "rate_limited"
  | "rate_limit_unavailable"
  | "internal_error"
  | "not_implemented";

/** The codes of a request the service cannot or will not serve as asked. */
type RequestErrorCode =
  | "bad_request"
  | "forbidden"
  | "not_found"
  | "method_not_allowed"
  | "request_timeout"
  | "not_implemented";

/** Every {@linkcode ErrorCode}, in the order the documentation lists them. */
export const ERROR_CODES: readonly ErrorCode[] = [
  "bad_request",
  "forbidden",
  "not_found",
  "method_not_allowed",
  "request_timeout",
  "rate_limited",
  "rate_limit_unavailable",
  "internal_error",
  "not_implemented",
];

/** The body of an error (spec section 2). */
export interface ErrorBody {
  /** The error. */
  error: { code: ErrorCode; message: string; hint: string };
}

/** An error's status and texts. */
export interface ErrorInfo {
  /** HTTP status. */
  status: number;
  /** Short title (Markdown and HTML headings). */
  title: string;
  /** `error.message`. */
  message: string;
  /** `error.hint`. */
  hint: string;
}

/** The status and texts of every code, for a configuration. */
export function errorCatalog(config: Config): Record<ErrorCode, ErrorInfo> {
  return { ...requestErrors(config), ...serviceErrors(config) };
}

/** The errors of a request the service cannot or will not serve as asked. */
function requestErrors(config: Config): Record<RequestErrorCode, ErrorInfo> {
  const base = config.baseUrl;
  return {
    bad_request: {
      status: STATUS.BadRequest,
      title: "Bad request",
      message:
        "This request cannot be read: its Host header is missing or not a valid host name, or its head is malformed or larger than 64 KiB.",
      hint:
        `Send an HTTP/1.1 request with Host as host[:port], as HTTP clients do by default; this service is ${base}.`,
    },
    forbidden: {
      // 403: the operator turned this caller's address away (RATE_LIMIT_DENY); waiting does not
      // help, so no Retry-After.
      status: STATUS.Forbidden,
      title: "Forbidden",
      message: "Requests from this address are not served.",
      hint:
        `If you think this is a mistake, contact ${config.supportEmail} and quote the time of the request.`,
    },
    not_found: {
      status: STATUS.NotFound,
      title: "Not found",
      message: "There is no public resource at this path.",
      hint:
        `Start at ${base}/api/v1/platform; the public paths are listed at ${base}/developers and in ${base}/openapi.json. Paths are case-sensitive and have no trailing slash.`,
    },
    method_not_allowed: {
      status: STATUS.MethodNotAllowed,
      title: "Method not allowed",
      message: "This resource supports only GET, HEAD and OPTIONS.",
      hint: "Send a GET request: the public discovery API is read-only.",
    },
    request_timeout: {
      // Node's entry only: Deno.serve has no such bound (lib/node/README.md, "A connection that
      // sends nothing"), and a connection that sent nothing is closed without an answer.
      status: STATUS.RequestTimeout,
      title: "Request timeout",
      message: "The request's head did not arrive in time.",
      hint: "Send the whole request head at once, on a new connection.",
    },
    not_implemented: {
      // RFC 9110 section 15.6.2: a method the server does not recognise, for any resource (405 is
      // for a method it knows but the resource does not allow).
      status: STATUS.NotImplemented,
      title: "Not implemented",
      message: "This service does not recognise the request's method.",
      hint: "Send a GET request: the public discovery API is read-only.",
    },
  };
}

/** The errors of the limiter and of the service itself. */
function serviceErrors(config: Config): Record<Exclude<ErrorCode, RequestErrorCode>, ErrorInfo> {
  return {
    rate_limited: {
      status: STATUS.TooManyRequests,
      title: "Too many requests",
      message:
        `Rate limit exceeded: ${config.rateLimit} requests per ${config.rateLimitWindowSeconds} seconds per caller.`,
      hint: "Wait at least the number of seconds in the Retry-After header before retrying.",
    },
    rate_limit_unavailable: {
      // 429 rather than 503: the limiter's store is down and the operator chose to refuse rather
      // than serve unlimited; the service itself is up, and a retry soon is expected to succeed.
      status: STATUS.TooManyRequests,
      title: "Too many requests",
      message:
        "The rate limiter cannot count requests right now, and this service refuses requests it cannot count.",
      hint: "Wait the number of seconds in the Retry-After header and retry; this is temporary.",
    },
    internal_error: {
      status: STATUS.InternalServerError,
      title: "Internal error",
      message: "The service failed to answer this request.",
      hint: `Retry later. If the problem persists, contact ${config.supportEmail}.`,
    },
  };
}

/** The JSON body of an error. */
export function errorJson(code: ErrorCode, info: ErrorInfo): string {
  const body: ErrorBody = { error: { code, message: info.message, hint: info.hint } };
  return JSON.stringify(body);
}

/** The Markdown body of an error. */
export function errorMarkdown(code: ErrorCode, info: ErrorInfo): string {
  return `# ${info.status} ${info.title}\n\n${info.message}\n\n- code: \`${code}\`\n- hint: ${info.hint}\n`;
}

/** Escapes text for HTML and turns the http(s) URLs in it into links (a trailing `.` or `;` ends one). */
function linkified(text: string): string {
  return escapeHtml(text).replace(
    /https?:\/\/[^\s<>"]+?(?=[.;,]?(?:\s|$))/g,
    (url) => `<a href="${url}">${url}</a>`,
  );
}

/** The HTML content (inside the layout) of an error page; the URLs of the hint are links. */
export function errorHtmlContent(code: ErrorCode, info: ErrorInfo): string {
  return `<h1>${info.status} ${escapeHtml(info.title)}</h1>\n<p>${
    escapeHtml(info.message)
  }</p>\n<p>${linkified(info.hint)}</p>\n<p>Error code: <code>${code}</code></p>\n`;
}
