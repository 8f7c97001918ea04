/**
 * Tests of the HTTP helpers: request paths without URL parsing, If-None-Match matching, the Host
 * check and the CORS preflight test.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  createHostCheck,
  ifNoneMatchMatches,
  isCorsPreflight,
  isValidHost,
  namesNoHost,
  pathOf,
} from "../../lib/http/message.ts";

Deno.test("pathOf() returns the path without query or fragment, as new URL() would", () => {
  const urls = [
    "http://localhost:8000/api/v1/platform",
    "http://localhost:8000/api/v1/platform?x=1&y=2",
    "http://localhost:8000/",
    "http://localhost:8000/?q",
    "https://example.com/a/b.md#frag",
    "http://[::1]:8000/llms.txt?a=/b",
    "http://localhost:8000/%2e%2e/x",
    "http://localhost:8000/a?b#c?d",
  ];
  // Request.url is what the handler sees: already parsed and normalised by the runtime.
  for (const url of urls) assert.equal(pathOf(new Request(url).url), new URL(url).pathname, url);
  assert.equal(pathOf(new Request("http://localhost:8000").url), "/");
});

Deno.test("ifNoneMatchMatches() uses weak comparison over a list, and * matches anything", () => {
  const etag = '"abc"';
  const cases: Array<[string, boolean]> = [
    ['"abc"', true],
    ['W/"abc"', true],
    ['"x", "abc"', true],
    ['"x",W/"abc"', true],
    ["*", true],
    ['"abcd"', false],
    ["abc", false],
    ['"x"', false],
    ["", false],
  ];
  for (const [value, expected] of cases) {
    assert.equal(ifNoneMatchMatches(value, etag), expected, value);
  }
});

Deno.test("createHostCheck() answers as isValidHost() does, the remembered host included", () => {
  const hostIsValid = createHostCheck();
  const hosts = [
    "api.example",
    "api.example",
    "a/b",
    "api.example",
    "[::1]:8000",
    "x@y",
    "[::1]:8000",
    "",
  ];
  for (const host of hosts) assert.equal(hostIsValid(host), isValidHost(host), host);
});

Deno.test("isValidHost() refuses an empty host, with or without a port (RFC 9110 section 4.2.1)", () => {
  assert.equal(isValidHost(""), false);
  assert.equal(isValidHost(":8000"), false);
  assert.equal(isValidHost("a"), true);
  assert.equal(isValidHost("a:"), true);
});

Deno.test("namesNoHost() tells the URL a runtime writes for a request that named no host", () => {
  // As Deno writes it (ext/http/request_properties.rs): localhost for a loopback or unspecified
  // listener, the address itself otherwise, with the port unless it is 80.
  const cases: Array<[string, string, boolean]> = [
    ["http://localhost:8000/api/v1/platform", "0.0.0.0", true],
    ["http://localhost/x", "::", true],
    ["http://localhost:8000/x", "127.0.0.1", true],
    ["http://10.0.0.5:8000/x", "10.0.0.5", true],
    ["http://[2001:db8::5]:8000/x", "2001:db8::5", true],
    ["http://[2001:db8::5]:8000/x", "[2001:db8::5]", true],
    // Deno writes an IPv4-mapped listener as itself (measured: request_target_test.ts).
    ["http://[::ffff:127.0.0.1]:8000/x", "::ffff:127.0.0.1", true],
    ["http://localhost:8000/x", "127.0.0.2", true],
    // Named by the client: an absolute-form target, HTTP/2's :authority.
    ["http://api.example/x", "0.0.0.0", false],
    ["http://10.0.0.5:8000/x", "0.0.0.0", false],
    ["http://127.0.0.1:8000/x", "0.0.0.0", false],
    ["http://localhost.example/x", "0.0.0.0", false],
    ["http://10.0.0.6:8000/x", "10.0.0.5", false],
    ["http://api.example?x", "0.0.0.0", false],
  ];
  for (const [url, listen, expected] of cases) {
    assert.equal(namesNoHost(url, listen), expected, `${url} on ${listen}`);
  }
});

Deno.test("isCorsPreflight() needs OPTIONS, Origin and Access-Control-Request-Method together", () => {
  const both = { origin: "https://a.example", "access-control-request-method": "GET" };
  assert.equal(isCorsPreflight("OPTIONS", new Headers(both)), true);
  assert.equal(isCorsPreflight("GET", new Headers(both)), false);
  assert.equal(isCorsPreflight("OPTIONS", new Headers({ origin: "https://a.example" })), false);
  assert.equal(
    isCorsPreflight("OPTIONS", new Headers({ "access-control-request-method": "GET" })),
    false,
  );
});
