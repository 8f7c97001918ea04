/**
 * Small HTTP helpers with no policy of their own: status names, the path of a request URL without
 * parsing it, and `If-None-Match` matching.
 *
 * @module
 */

/** The status codes the service answers with, by name. */
export const STATUS = {
  OK: 200,
  NoContent: 204,
  NotModified: 304,
  BadRequest: 400,
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
 * pathOf("http://localhost:8000/api/v1/platform?x=1"); // "/api/v1/platform"
 * ```
 */
export function pathOf(url: string): string {
  const scheme = url.indexOf("://");
  const start = url.indexOf("/", scheme === -1 ? 0 : scheme + 3);
  if (start === -1) return "/";
  let end = url.length;
  const query = url.indexOf("?", start);
  if (query !== -1) end = query;
  const hash = url.indexOf("#", start);
  if (hash !== -1 && hash < end) end = hash;
  return url.slice(start, end);
}

/**
 * Whether an `If-None-Match` value matches `etag`, by the weak comparison RFC 9110 section 13.1.2
 * requires (`W/` prefixes are ignored; `*` matches any current representation).
 */
export function ifNoneMatchMatches(ifNoneMatch: string, etag: string): boolean {
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
  return HOST.test(host);
}
