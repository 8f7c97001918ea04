/**
 * Tests of content negotiation: media types with q-values and fallbacks, codings, and the memo.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import Negotiator from "negotiator";
import {
  ENCODINGS,
  isCommonAccept,
  isCommonAcceptEncoding,
  loadNegotiator,
  memoize,
  preferredEncoding,
  preferredType,
  withoutMediaTypeParameters,
} from "../../lib/http/negotiate.ts";

// The values that need negotiator are negotiated by it here; the common ones never are.
await loadNegotiator();

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

Deno.test("memoize() answers each value with its own result when values alternate or repeat", () => {
  let calls = 0;
  const f = memoize((value) => {
    calls++;
    return value === null ? "none" : `got ${value}`;
  });
  const sequence = ["a", "a", "b", "a", null, "a", "b", "b", null, "c", "a"];
  for (const value of sequence) {
    assert.equal(f(value), value === null ? "none" : `got ${value}`, String(value));
  }
  assert.equal(calls, 4, "computed once per distinct value (a, b, null, c)");
  const long = "x".repeat(300);
  assert.equal(f(long), "none", "a value over MAX_NEGOTIATED_LENGTH is absent");
  assert.equal(f("a"), "got a", "a long value in between does not take the last value's place");
});

Deno.test("memoize() answers a long value as absent: its function never sees it, and memory is bounded by size as well as count", () => {
  const seen: (string | null)[] = [];
  const f = memoize((value) => {
    seen.push(value);
    return value?.length ?? -1;
  });
  const long = "text/markdown, ".repeat(100);
  assert.equal(f(long), -1);
  assert.equal(f(long), -1);
  assert.deepEqual(seen, [null], "computed once, for absent");
});

interface ReferenceNegotiator {
  mediaTypes(available: string[]): string[];
  encodings(available: string[], options?: { preferred?: string[] }): string[];
}
const Reference = Negotiator as unknown as new (
  request: { headers: Record<string, string> },
) => ReferenceNegotiator;

/** Runs of each property: the fast path must agree with negotiator on every generated value. */
const FAST_PATH_RUNS = 2000;

const mediaToken = fc.stringMatching(/^[a-zA-Z0-9.+*!#$&^_-]{1,12}$/);
const plainAccept = fc.oneof(
  fc.constantFrom("*/*", "text/markdown", "application/json", "text/html", "text/plain"),
  fc.constantFrom("TEXT/MARKDOWN", "Application/Json", "text/*", "*/markdown", "text/markdown "),
  fc.tuple(mediaToken, mediaToken).map(([type, subtype]) => `${type}/${subtype}`),
);
const coding = fc.oneof(
  fc.constantFrom("br", "gzip", "identity", "deflate", "zstd", "*", "BR", "Gzip", "x-gzip"),
  fc.stringMatching(/^[a-zA-Z0-9*-]{1,8}$/),
);
const plainAcceptEncoding = fc.tuple(
  fc.array(coding, { minLength: 1, maxLength: 5 }),
  fc.constantFrom(",", ", ", " , ", " ,"),
).map(([codings, separator]) => codings.join(separator));

Deno.test("preferredType() without negotiator gives negotiator's answer to every plain Accept", () => {
  let fast = 0;
  fc.assert(
    fc.property(plainAccept, fc.constantFrom(PLATFORM, PAGE), (accept, supported) => {
      if (isCommonAccept(accept)) fast++;
      const ranked = new Reference({ headers: { accept: withoutMediaTypeParameters(accept) } })
        .mediaTypes([...supported]);
      assert.equal(preferredType(accept, supported), ranked[0] ?? supported[0], accept);
    }),
    { numRuns: FAST_PATH_RUNS },
  );
  assert.ok(fast > FAST_PATH_RUNS / 4, `only ${fast} values took the fast path`);
});

Deno.test("preferredEncoding() without negotiator gives negotiator's answer to every weightless list", () => {
  let fast = 0;
  fc.assert(
    fc.property(plainAcceptEncoding, (acceptEncoding) => {
      if (isCommonAcceptEncoding(acceptEncoding)) fast++;
      const ranked = new Reference({ headers: { "accept-encoding": acceptEncoding } })
        .encodings([...ENCODINGS], { preferred: [...ENCODINGS] });
      assert.equal(preferredEncoding(acceptEncoding), ranked[0] ?? "identity", acceptEncoding);
    }),
    { numRuns: FAST_PATH_RUNS },
  );
  assert.ok(fast > FAST_PATH_RUNS / 4, `only ${fast} values took the fast path`);
});

Deno.test("a failed load of negotiator is not kept: the next value that needs it loads it again", async () => {
  // A second instance of the module (its own query string), in which negotiator is not loaded.
  const url = new URL("../../lib/http/negotiate.ts?failed-load", import.meta.url).href;
  const fresh: typeof import("../../lib/http/negotiate.ts") = await import(url);
  await assert.rejects(
    fresh.loadNegotiator(() => Promise.reject(new Error("no memory"))),
    /no memory/,
  );
  assert.equal(fresh.negotiatorLoaded(), false);
  const weighted = "application/json;q=0.5, text/markdown;q=0.9";
  assert.equal(await fresh.preferredType(weighted, PLATFORM), "text/markdown");
  assert.equal(fresh.negotiatorLoaded(), true);
});

Deno.test("before negotiator is loaded, a weighted value is answered with a promise (not remembered) and a common one at once", async () => {
  // A second instance of the module (its own query string), in which negotiator is not loaded.
  const url = new URL("../../lib/http/negotiate.ts?unloaded", import.meta.url).href;
  const fresh: typeof import("../../lib/http/negotiate.ts") = await import(url);
  assert.equal(fresh.negotiatorLoaded(), false);
  const types = ["application/json", "text/markdown"] as const;
  assert.equal(fresh.preferredType("text/markdown", types), "text/markdown");
  assert.equal(fresh.preferredEncoding("gzip, deflate, br"), "br");
  const forPlatform = fresh.memoize((accept) => fresh.preferredType(accept, types));
  const weighted = "application/json;q=0.5, text/markdown;q=0.9";
  const pending = forPlatform(weighted);
  assert.ok(pending instanceof Promise);
  const encoding = fresh.preferredEncoding("br;q=0.5, gzip");
  assert.ok(encoding instanceof Promise);
  assert.equal(await pending, "text/markdown");
  assert.equal(await encoding, "gzip");
  assert.equal(fresh.negotiatorLoaded(), true);
  // The promise was not remembered: the value is now answered at once.
  assert.equal(forPlatform(weighted), "text/markdown");
  assert.equal(fresh.preferredEncoding("br;q=0.5, gzip"), "gzip");
});
