/**
 * Tests of content negotiation: media types with q-values and fallbacks, codings, and the memo.
 *
 * @module
 */

import assert from "node:assert/strict";
import { memoize, preferredEncoding, preferredType } from "../../lib/http/negotiate.ts";

const PLATFORM = ["application/json", "text/markdown"] as const;
const PAGE = ["text/html", "text/markdown"] as const;

Deno.test("preferredType() follows q-values, specificity and order", () => {
  const cases: Array<
    [string | null, readonly ["application/json" | "text/html", "text/markdown"], string]
  > = [
    [null, PLATFORM, "application/json"],
    ["", PLATFORM, "application/json"],
    ["*/*", PLATFORM, "application/json"],
    ["text/markdown", PLATFORM, "text/markdown"],
    ["text/markdown;q=0.9, application/json;q=0.5", PLATFORM, "text/markdown"],
    ["text/markdown;q=0.1, application/json", PLATFORM, "application/json"],
    ["text/*", PLATFORM, "text/markdown"],
    ["text/markdown, application/json", PLATFORM, "text/markdown"],
    ["TEXT/MARKDOWN", PLATFORM, "text/markdown"],
    ["text/markdown;q=0", PLATFORM, "application/json"],
    ["text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", PAGE, "text/html"],
    ["text/markdown, text/html;q=0.5", PAGE, "text/markdown"],
    ["application/json", PAGE, "text/html"], // matches nothing: the default, not 406
    ["image/png", PLATFORM, "application/json"],
    ["garbage;;;,,q=", PLATFORM, "application/json"],
    // Parameters other than q do not keep a range from matching the one Markdown there is.
    ["text/markdown; charset=utf-8", PLATFORM, "text/markdown"],
    ["text/markdown;charset=UTF-8, application/json;q=0.5", PLATFORM, "text/markdown"],
    ["text/markdown; variant=CommonMark", PAGE, "text/markdown"],
    [
      'text/markdown; charset="utf-8"; q=0.4, application/json; q=0.5',
      PLATFORM,
      "application/json",
    ],
    ["application/json; charset=utf-8", PLATFORM, "application/json"],
  ];
  for (const [accept, supported, expected] of cases) {
    assert.equal(preferredType(accept, supported), expected, String(accept));
  }
});

Deno.test("preferredEncoding() prefers br, then gzip, and falls back to identity", () => {
  const cases: Array<[string | null, string]> = [
    [null, "identity"],
    ["", "identity"],
    ["gzip", "gzip"],
    ["gzip, deflate, br", "br"],
    ["gzip, br", "br"],
    ["br;q=0.5, gzip", "gzip"],
    ["*", "br"],
    ["deflate", "identity"],
    ["identity;q=0", "identity"],
    ["br;q=0, gzip;q=0", "identity"],
    ["GZIP", "gzip"],
  ];
  for (const [value, expected] of cases) {
    assert.equal(preferredEncoding(value), expected, String(value));
  }
});

Deno.test("memoize() computes once per value, including null, and stays bounded", () => {
  let calls = 0;
  const f = memoize((value) => {
    calls++;
    return value?.length ?? -1;
  });
  assert.equal(f("abc"), 3);
  assert.equal(f("abc"), 3);
  assert.equal(f(null), -1);
  assert.equal(f(null), -1);
  assert.equal(calls, 2);
  for (let i = 0; i < 5000; i++) f(`v${i}`);
  assert.equal(calls, 5002);
  // Still correct after the memo has been cleared.
  assert.equal(f("abcd"), 4);
});

Deno.test("memoize() does not remember long values, so memory is bounded by size as well as count", () => {
  let calls = 0;
  const f = memoize((value) => {
    calls++;
    return value?.length ?? -1;
  });
  const long = "text/markdown, ".repeat(100);
  assert.equal(f(long), long.length);
  assert.equal(f(long), long.length);
  assert.equal(calls, 2, "computed each time");
});
