/**
 * The URL of a request as Deno builds it, from what Node's parser read: the request target in each
 * of its forms (RFC 9112 section 3.2), `Host`, and the listener's own address when the request named
 * no host. The handler reads its path (and, without `Host`, its host: `namesNoHost` in
 * lib/http/message.ts), so both runtimes must write the same URL for the same request:
 *
 * - origin-form (`/path?query`): `http://` + `Host` + the target;
 * - absolute-form (`http://host/path`): the target itself, whatever `Host` says (section 3.2.2);
 * - asterisk-form (`*`, OPTIONS only): `http://` + `Host` + `/*`;
 * - authority-form (`host:port`, CONNECT only): `http://` + the target.
 *
 * A target in a form its method cannot have (`GET *`, `CONNECT /path`, `GET host:1`) is one Deno's
 * parser refuses with 400 (libs/http_h1/parse.rs, `valid_request_target`): no URL.
 *
 * @module
 */

import { isLocalListener } from "../../http/address.ts";

/** A scheme and `://`, then at least one character: RFC 9112's absolute-form as Deno recognises it. */
const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/./;

/**
 * The URL of a request, or undefined when its target is not a form its method may have.
 *
 * @param host the request's (first) `Host` value; empty or absent means none
 * @param fallback the listener's authority ({@linkcode fallbackAuthority}), for a request without one
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(urlOf("GET", "/a?b", "api.example", "localhost:8000"), "http://api.example/a?b");
 * assert.equal(urlOf("GET", "http://x.example/a", "api.example", "localhost:8000"), "http://x.example/a");
 * assert.equal(urlOf("OPTIONS", "*", undefined, "localhost:8000"), "http://localhost:8000/*");
 * assert.equal(urlOf("CONNECT", "x.example:443", undefined, "localhost:8000"), "http://x.example:443");
 * assert.equal(urlOf("GET", "*", "api.example", "localhost:8000"), undefined);
 * ```
 */
export function urlOf(
  method: string,
  target: string,
  host: string | undefined,
  fallback: string,
): string | undefined {
  const authority = host === undefined || host === "" ? fallback : host;
  if (method === "CONNECT") {
    return target === "" || target[0] === "/" || target[0] === "*" || ABSOLUTE_FORM.test(target)
      ? undefined
      : `http://${target}`;
  }
  if (target[0] === "/") return `http://${authority}${target}`;
  if (target === "*") return method === "OPTIONS" ? `http://${authority}/*` : undefined;
  return ABSOLUTE_FORM.test(target) ? target : undefined;
}

/**
 * The authority a URL names when the request named none: as Deno writes it
 * (ext/http/request_properties.rs, `req_host_from_addr`), `localhost` for a loopback or unspecified
 * address (`isLocalListener`), the address itself otherwise, then the port unless it is 80.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(fallbackAuthority("0.0.0.0", 8000), "localhost:8000");
 * assert.equal(fallbackAuthority("::1", 80), "localhost");
 * assert.equal(fallbackAuthority("2001:db8::5", 8000), "[2001:db8::5]:8000");
 * ```
 */
export function fallbackAuthority(address: string, port: number): string {
  const host = isLocalListener(address)
    ? "localhost"
    : address.includes(":")
    ? `[${address}]`
    : address;
  return port === 80 ? host : `${host}:${port}`;
}
