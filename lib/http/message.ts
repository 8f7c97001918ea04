/**
 * Small HTTP helpers with no policy of their own: status names, the header field type, the path of a
 * request URL without parsing it, `If-None-Match` matching, `Host` validity and the CORS preflight.
 *
 * @module
 */

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
  TooManyRequests: 429,
  InternalServerError: 500,
} as const;

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

/** host, IPv4, or bracketed IPv6, then an optional port: what RFC 9112 section 3.2 allows in `Host`. */
const HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(?::\d*)?$/;

/**
 * Whether a `Host` value is a valid host[:port]. The runtime builds `Request.url` from it, so a value
 * with `/`, `?`, `#` or `@` in it would otherwise choose the path the handler sees.
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
  let lastValid = "";
  return (host) => {
    if (host === lastValid) return true;
    if (!isValidHost(host)) return false;
    lastValid = host;
    return true;
  };
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
