/**
 * Tests of the URL Node's entry gives the handler (lib/node/http1/request_target.ts): Deno's URL for
 * each form of request target, and none for a form its method cannot have.
 *
 * @module
 */

import assert from "node:assert/strict";
import { fallbackAuthority, urlOf } from "../../../lib/node/http1/request_target.ts";

const FALLBACK = "localhost:8000";

Deno.test("urlOf() writes each target form's URL as Deno does (RFC 9112 section 3.2)", () => {
  // As tests/node/parity_test.ts sees Deno write them, and the handler reads them.
  const cases: Array<[string, string, string | undefined, string]> = [
    ["GET", "/a?b", "api.example", "http://api.example/a?b"],
    ["GET", "/a", undefined, "http://localhost:8000/a"],
    ["GET", "/a", "", "http://localhost:8000/a"],
    ["GET", "http://x.example/a", "api.example", "http://x.example/a"],
    ["GET", "HTTP://X.example/a", undefined, "HTTP://X.example/a"],
    ["GET", "ftp://x.example/a", "api.example", "ftp://x.example/a"],
    ["OPTIONS", "*", "api.example", "http://api.example/*"],
    ["CONNECT", "x.example:443", "api.example", "http://x.example:443"],
  ];
  for (const [method, target, host, url] of cases) {
    assert.equal(urlOf(method, target, host, FALLBACK), url, `${method} ${target}`);
  }
});

Deno.test("urlOf() gives no URL for a target its method cannot have (Deno's parser answers 400)", () => {
  const cases: Array<[string, string]> = [
    ["GET", "*"],
    ["POST", "*"],
    ["GET", "x.example:443"],
    ["GET", "abc"],
    ["GET", "http://"],
    ["CONNECT", "/a"],
    ["CONNECT", "*"],
    ["CONNECT", "http://x.example/"],
    ["CONNECT", ""],
  ];
  for (const [method, target] of cases) {
    assert.equal(urlOf(method, target, "api.example", FALLBACK), undefined, `${method} ${target}`);
  }
});

Deno.test("fallbackAuthority() names a loopback or unspecified listener localhost, and drops port 80", () => {
  assert.equal(fallbackAuthority("0.0.0.0", 8000), "localhost:8000");
  assert.equal(fallbackAuthority("::", 8000), "localhost:8000");
  assert.equal(fallbackAuthority("127.0.0.1", 80), "localhost");
  assert.equal(fallbackAuthority("10.0.0.5", 8000), "10.0.0.5:8000");
  assert.equal(fallbackAuthority("10.0.0.5", 80), "10.0.0.5");
  assert.equal(fallbackAuthority("2001:db8::5", 8000), "[2001:db8::5]:8000");
});

/** The URL Deno builds for an HTTP/1.0 request without `Host` to a listener on `hostname`. */
async function denoUrlWithoutHost(hostname: string): Promise<{ url: string; port: number }> {
  let url = "";
  await using server = Deno.serve({ hostname, port: 0, onListen() {} }, (request) => {
    url = request.url;
    return new Response("ok");
  });
  const connectTo = hostname.startsWith("::ffff:") ? hostname.slice("::ffff:".length) : hostname;
  const conn = await Deno.connect({ hostname: connectTo, port: server.addr.port });
  await conn.write(new TextEncoder().encode("GET /x HTTP/1.0\r\n\r\n"));
  // HTTP/1.0 without keep-alive: the server closes once it has answered.
  for await (const _ of conn.readable) { /* drain */ }
  return { url, port: server.addr.port };
}

/** Why the comparison with Deno's server is ignored (npm test on Node), or undefined under Deno. */
const notOnDeno = "version" in Deno ? undefined : "it asks Deno's own server, which Node has not";

Deno.test({
  name:
    `fallbackAuthority() writes the authority Deno writes for a request without Host, listener by listener${
      notOnDeno === undefined ? "" : ` (ignored: ${notOnDeno})`
    }`,
  ignore: notOnDeno !== undefined,
  fn: compareWithDeno,
});

/** Holds fallbackAuthority() to the URL Deno's server writes for each loopback listener. */
async function compareWithDeno(): Promise<void> {
  // Loopback listeners only (tests stay on this machine); 0.0.0.0 and :: are in address_test's table.
  for (const hostname of ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"]) {
    let seen: { url: string; port: number };
    try {
      seen = await denoUrlWithoutHost(hostname);
    } catch (error) {
      // A host without IPv6 (or without IPv4-mapped sockets) cannot listen there: nothing to compare.
      if (hostname.includes(":") && error instanceof Deno.errors.AddrNotAvailable) continue;
      throw error;
    }
    assert.equal(
      seen.url,
      `http://${fallbackAuthority(hostname, seen.port)}/x`,
      `a listener on ${hostname}`,
    );
  }
}
