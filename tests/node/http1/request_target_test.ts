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
