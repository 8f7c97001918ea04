/**
 * Tests of the HTTP helpers: request paths without URL parsing, and If-None-Match matching.
 *
 * @module
 */

import assert from "node:assert/strict";
import { ifNoneMatchMatches, pathOf } from "../../lib/http/message.ts";

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
