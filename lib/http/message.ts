/**
 * Small HTTP helpers with no policy of their own: status names, the header field type, the path of a
 * request URL without parsing it, `If-None-Match` matching, `Host` validity and the CORS preflight.
 *
 * @module
 */

import { isLocalListener } from "./address.ts";

/** A header field as a name/value pair, in the order it is sent. */
export type HeaderField = readonly [string, string];

/** The status codes the service answers with, by name. */
export const STATUS = {
  OK: 200,
  NoContent: 204,
  NotModified: 304,
  BadRequest: 400,
  Forbidden: 403,
  NotFound: 404,
  MethodNotAllowed: 405,
  RequestTimeout: 408,
  TooManyRequests: 429,
  InternalServerError: 500,
  NotImplemented: 501,
} as const;

/**
 * The methods the service recognises: RFC 9110's (section 9) and PATCH (RFC 5789). Any other method
 * is answered 501, on every path (RFC 9110 sections 9.1 and 15.6.2: "the appropriate response when
 * the server does not recognize the request method"); one of these that a path does not allow, 405.
 * Each is a method Node's parser knows (`http.METHODS`), so that the handler decides for both
 * runtimes: Node's parser refuses any other, and its entry hands such a request to the handler itself
 * (lib/node/http1/client_error.ts).
 */
export const RECOGNISED_METHODS: ReadonlySet<string> = new Set([
  "GET",
  "HEAD",
  "POST",
  "PUT",
  "DELETE",
  "CONNECT",
  "OPTIONS",
  "TRACE",
  "PATCH",
]);

/**
 * The path of an absolute request URL, without query or fragment, as sent (not decoded).
 * `Request.url` is always absolute and normalised, so a scan is enough; `new URL()` per request is not
 * needed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(pathOf("http://localhost:8000/api/v1/platform?x=1"), "/api/v1/platform");
 * ```
 */
export function pathOf(url: string): string {
  const scheme = url.indexOf("://");
  return pathFrom(url, url.indexOf("/", scheme === -1 ? 0 : scheme + 3));
}

/** The path that starts at `start` of `url` (`/` when `start` is -1), up to its query or fragment. */
function pathFrom(url: string, start: number): string {
  if (start === -1) return "/";
  let end = url.length;
  const query = url.indexOf("?", start);
  if (query !== -1) end = query;
  const hash = url.indexOf("#", start);
  if (hash !== -1 && hash < end) end = hash;
  return url.slice(start, end);
}

/**
 * The path of the request target, whatever `Host` says. The runtime builds `Request.url` as the
 * scheme, `://`, the `Host` value as sent and the target, so a `Host` of `evil.example/fake/path?`
 * would make {@linkcode pathOf} read `/fake/path` for a request of `/api/v1/platform`: the target
 * starts where the `Host` value ends. (Such a request is answered 400; its access-log line and
 * span still name the path it asked for.)
 *
 * @param host the request's `Host` value (`null` when it has none)
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const host = "evil.example/fake/path?";
 * assert.equal(requestPathOf(`http://${host}/api/v1/platform?q=1`, host), "/api/v1/platform");
 * assert.equal(requestPathOf("http://localhost:8000/x?y", "localhost:8000"), "/x");
 * ```
 */
export function requestPathOf(url: string, host: string | null): string {
  const scheme = url.indexOf("://");
  if (host === null || scheme === -1 || !url.startsWith(host, scheme + 3)) return pathOf(url);
  const start = scheme + 3 + host.length;
  return url[start] === "/" ? pathFrom(url, start) : pathOf(url);
}

/**
 * The longest `If-None-Match` value read (about twenty of the service's tags); a longer one is
 * treated as absent (lib/README.md, "Compression and caching").
 */
export const MAX_IF_NONE_MATCH_LENGTH = 1024;

/**
 * The longest `Host` value accepted: a DNS name of 253 characters, `:` and a port. A longer one is
 * not a valid host and is answered 400.
 */
export const MAX_HOST_LENGTH = 259;

/**
 * Whether an `If-None-Match` value matches `etag`, by the weak comparison RFC 9110 section 13.1.2
 * requires (`W/` prefixes are ignored; `*` matches any current representation).
 */
export function ifNoneMatchMatches(ifNoneMatch: string, etag: string): boolean {
  // Over the bound, the field is treated as absent: the full representation, never a 304.
  if (ifNoneMatch.length > MAX_IF_NONE_MATCH_LENGTH) return false;
  const value = ifNoneMatch.trim();
  if (value === "*") return true;
  const opaque = etag.startsWith("W/") ? etag.slice(2) : etag;
  for (const raw of value.split(",")) {
    const candidate = raw.trim();
    if ((candidate.startsWith("W/") ? candidate.slice(2) : candidate) === opaque) return true;
  }
  return false;
}

/**
 * host, IPv4, or bracketed IPv6, then an optional port: what RFC 9112 section 3.2 allows in `Host`,
 * the host not empty (RFC 9110 section 4.2.1: an `http` URI with an empty host is invalid, and its
 * recipient must reject it).
 */
const HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]+)(?::\d*)?$/;

/**
 * Whether a `Host` value is a valid host[:port]. The runtime builds `Request.url` from it, so a value
 * with `/`, `?`, `#` or `@` in it would otherwise choose the path the handler sees. An empty value
 * is not valid: the service's URIs are `http` ones, whose host is never empty.
 */
export function isValidHost(host: string): boolean {
  return host.length <= MAX_HOST_LENGTH && HOST.test(host);
}

/**
 * An {@linkcode isValidHost} for the hot path: nearly every request names the same host, so the last
 * valid one is remembered and answered without the regular expression.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const hostIsValid = createHostCheck();
 * assert.equal(hostIsValid("api.example.com"), true);
 * assert.equal(hostIsValid("evil.example/path"), false);
 * ```
 */
export function createHostCheck(): (host: string) => boolean {
  let lastValid: string | undefined;
  return (host) => {
    if (host === lastValid) return true;
    if (!isValidHost(host)) return false;
    lastValid = host;
    return true;
  };
}

/**
 * Whether a request that carries no `Host` field named no host at all, so that RFC 9112 section 3.2
 * requires a 400. The runtime builds its URL from what the client named: the target's authority
 * (absolute-form, HTTP/2's `:authority`), else `Host`, else the listener's own address, which Deno
 * writes as `localhost` for a loopback or unspecified one and as the address itself otherwise
 * (ext/http/request_properties.rs, `req_host_from_addr`); Node's entry writes it the same way
 * (lib/node/http1/request_target.ts). An HTTP/1.0 request without `Host` is one too: Deno gives the
 * handler the same URL and fields for both versions, and RFC 9110 section 7.2 asks every client to
 * send `Host`. An HTTP/2 request whose `:authority` is `localhost` cannot be told from one that named
 * nothing (lib/node/README.md).
 *
 * @param url the request's URL, as the runtime built it
 * @param listenHostname the address the service listens on (`HOSTNAME`)
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(namesNoHost("http://localhost:8000/api/v1/platform", "0.0.0.0"), true);
 * assert.equal(namesNoHost("http://api.example.com/api/v1/platform", "0.0.0.0"), false);
 * assert.equal(namesNoHost("http://[2001:db8::5]:8000/", "2001:db8::5"), true);
 * ```
 */
export function namesNoHost(url: string, listenHostname: string): boolean {
  const scheme = url.indexOf("://");
  if (scheme === -1) return false;
  const start = scheme + 3;
  let end = start;
  while (end < url.length && url[end] !== "/" && url[end] !== "?" && url[end] !== "#") end++;
  const authority = url.slice(start, end);
  const closing = authority.startsWith("[") ? authority.indexOf("]") : -1;
  const colon = authority.indexOf(":", closing === -1 ? 0 : closing);
  const hostname = (colon === -1 ? authority : authority.slice(0, colon)).replace(/^\[|\]$/g, "");
  return hostname === "localhost" ||
    (!isLocalListener(listenHostname) &&
      hostname === listenHostname.replace(/^\[|\]$/g, ""));
}

/**
 * Whether a request is a CORS preflight: `OPTIONS` with `Origin` and `Access-Control-Request-Method`
 * (the browser asking permission, not the caller's own request).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const headers = new Headers({ origin: "https://a.example", "access-control-request-method": "GET" });
 * assert.equal(isCorsPreflight("OPTIONS", headers), true);
 * assert.equal(isCorsPreflight("OPTIONS", new Headers()), false);
 * ```
 */
export function isCorsPreflight(method: string, headers: Pick<Headers, "has">): boolean {
  return method === "OPTIONS" && headers.has("origin") &&
    headers.has("access-control-request-method");
}
