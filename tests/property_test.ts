/**
 * Property tests (fast-check): whatever path, method and negotiation headers a caller sends, the
 * handler answers without a server error (501 for a method it does not recognise, as RFC 9110 asks),
 * with the header fields every response carries, and with the status the path and method call for; negotiation never throws and always yields a supported value,
 * and honours q-values.
 *
 * The handler is called in process with real `Request`s and a fixed clock; runs are bounded.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import { createHandler } from "../lib/handler.ts";
import {
  type Encoding,
  loadNegotiator,
  preferredEncoding,
  preferredType,
} from "../lib/http/negotiate.ts";
import { RECOGNISED_METHODS } from "../lib/http/message.ts";
import { MemoryStore } from "../lib/limit/memory/memory_store.ts";
import { buildAnswers } from "../lib/respond/paths.ts";
import { RATE_LIMIT_FIELDS, testConfig, testContent } from "./_server.ts";

const NUM_RUNS = 300;
const INFO = { remoteAddr: { transport: "tcp" as const, hostname: "192.0.2.1", port: 1 } };

const config = testConfig({ RATE_LIMIT: "1000000" });
const content = testContent(config);
const KNOWN_PATHS = [...buildAnswers(config, content).paths.keys()];

// ---------------------------------------------------------------------------------------------------
// Arbitraries

/** Header-value characters: visible Latin-1, space and tab (what `Headers` accepts). */
const headerChar = fc.oneof(
  fc.integer({ min: 0x20, max: 0x7e }),
  fc.integer({ min: 0xa0, max: 0xff }),
  fc.constant(0x09),
).map((code) => String.fromCharCode(code));
const headerValue = fc.string({ unit: headerChar, maxLength: 200 });

const qValue = fc.oneof(
  fc.integer({ min: 0, max: 1000 }).map((n) => String(n / 1000)),
  fc.constantFrom("1.0", "0.000", "1.5", "-1", "abc", "", ".5", "0.", "NaN", "1e3"),
);

const mediaRange = fc.oneof(
  fc.constantFrom(
    "text/markdown",
    "text/html",
    "application/json",
    "*/*",
    "text/*",
    "application/*",
    "*",
    "image/png",
    "TEXT/MARKDOWN",
    "text/markdown;charset=utf-8",
    "application/problem+json",
    "text/plain",
    "/",
    "text/",
    ";q=1",
  ),
  fc.tuple(fc.stringMatching(/^[a-z*]{1,8}$/), fc.stringMatching(/^[a-z0-9.+*-]{1,12}$/))
    .map(([type, subtype]) => `${type}/${subtype}`),
);

/** A structured Accept value: media ranges with (sometimes odd) q-values and parameters. */
const structuredAccept = fc.array(
  fc.tuple(mediaRange, fc.option(qValue, { nil: undefined }), fc.boolean()),
  { maxLength: 6 },
).map((items) =>
  items.map((
    [range, q, spaced],
  ) => (q === undefined ? range : `${range};${spaced ? " " : ""}q=${q}`))
    .join(", ")
);
const acceptHeader = fc.oneof(structuredAccept, headerValue);

const encodingToken = fc.constantFrom("br", "gzip", "identity", "*", "deflate", "BR", "x-gzip", "");
const structuredAcceptEncoding = fc.array(
  fc.tuple(encodingToken, fc.option(qValue, { nil: undefined })),
  { maxLength: 5 },
).map((items) => items.map(([e, q]) => (q === undefined ? e : `${e};q=${q}`)).join(", "));
const acceptEncodingHeader = fc.oneof(structuredAcceptEncoding, headerValue);

const entityTag = fc.oneof(
  fc.stringMatching(/^[A-Za-z0-9_-]{0,27}$/).map((s) => `"${s}"`),
  fc.stringMatching(/^[A-Za-z0-9_-]{0,27}$/).map((s) => `W/"${s}"`),
  fc.constant("*"),
);
const ifNoneMatchHeader = fc.oneof(
  fc.array(entityTag, { minLength: 1, maxLength: 4 }).map((tags) => tags.join(", ")),
  headerValue,
);

const segment = fc.oneof(
  fc.constantFrom(
    "..",
    ".",
    "",
    "%",
    "%2e%2e",
    "%2E",
    "%2F",
    "%00",
    "%ZZ",
    "%e2%82%ac",
    "api",
    "v1",
    "platform",
    "developers",
    "deprecation-policy.md",
    "openapi.json",
    "llms.txt",
    ".well-known",
    "API",
    "\\",
    ";",
    "?",
    "#",
    "~",
    "@",
    ":",
  ),
  fc.string({ maxLength: 20 }),
  fc.string({ unit: "binary", maxLength: 10 }),
);
const path = fc.oneof(
  fc.constantFrom(...KNOWN_PATHS),
  fc.tuple(fc.constantFrom(...KNOWN_PATHS), fc.constantFrom("/", "//", "?x=1", "#f", "/.", "%20"))
    .map(([known, suffix]) => known + suffix),
  fc.constantFrom(...KNOWN_PATHS).map((known) => known.toUpperCase()),
  fc.array(segment, { maxLength: 8 }).map((segments) => `/${segments.join("/")}`),
  fc.webPath(),
  fc.string({ minLength: 2000, maxLength: 8000 }).map((s) => `/${s}`),
);

const FORBIDDEN_METHODS = new Set(["CONNECT", "TRACE", "TRACK"]);
const method = fc.oneof(
  fc.constantFrom("GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH", "get", "Head"),
  fc.constantFrom("PROPFIND", "QUERY", "PURGE", "LINK"),
  fc.stringMatching(/^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,16}$/),
).filter((m) => !FORBIDDEN_METHODS.has(m.toUpperCase()));

const requestArbitrary = fc.record({
  path,
  method,
  accept: fc.option(acceptHeader, { nil: undefined }),
  acceptEncoding: fc.option(acceptEncodingHeader, { nil: undefined }),
  ifNoneMatch: fc.option(ifNoneMatchHeader, { nil: undefined }),
  preflight: fc.boolean(),
});

// ---------------------------------------------------------------------------------------------------
// The handler

Deno.test("for random paths, methods and negotiation headers the handler answers no 5xx but 501 for an unknown method", async () => {
  const store = new MemoryStore({ limit: config.rateLimit, windowMs: 60_000 }, { sweep: false });
  const errors: unknown[] = [];
  const handler = createHandler({
    config,
    content,
    store,
    now: () => Date.UTC(2026, 0, 1),
    onError: (error) => errors.push(error),
  });
  try {
    await fc.assert(
      fc.asyncProperty(requestArbitrary, async (input) => {
        const headers = new Headers();
        if (input.accept !== undefined) headers.set("accept", input.accept);
        if (input.acceptEncoding !== undefined) {
          headers.set("accept-encoding", input.acceptEncoding);
        }
        if (input.ifNoneMatch !== undefined) headers.set("if-none-match", input.ifNoneMatch);
        if (input.preflight) {
          headers.set("origin", "https://app.example.org");
          headers.set("access-control-request-method", "GET");
        }
        const request = new Request(`http://localhost${input.path}`, {
          method: input.method,
          headers,
        });
        const response = await handler(request, INFO);
        await response.body?.cancel();

        const what = `${request.method} ${request.url.slice(0, 200)}`;
        const recognised = RECOGNISED_METHODS.has(request.method);
        assert.ok(response.status < 500 || !recognised, `${what}: ${response.status}`);
        for (const name of RATE_LIMIT_FIELDS) {
          assert.ok(response.headers.has(name), `${what}: ${name}`);
        }
        assert.equal(response.headers.get("x-content-type-options"), "nosniff", what);
        assert.equal(response.headers.get("access-control-allow-origin"), "*", what);

        // And the status the path and method call for.
        const known = KNOWN_PATHS.includes(new URL(request.url).pathname);
        const m = request.method;
        // A CORS preflight is granted on every path, known or not (DESIGN.md).
        const expected = !recognised
          ? [501]
          : m === "OPTIONS" && input.preflight
          ? [204]
          : !known
          ? [404]
          : m === "GET" || m === "HEAD"
          ? [200, 304]
          : m === "OPTIONS"
          ? [204]
          : [405];
        assert.ok(expected.includes(response.status), `${what}: ${response.status}`);
        if (m === "HEAD" || response.status === 204 || response.status === 304) {
          assert.equal(response.body, null, `${what}: no body`);
        }
      }),
      { numRuns: NUM_RUNS },
    );
  } finally {
    store.close();
  }
  assert.deepEqual(errors, [], "no unexpected error reached the edge");
});

// ---------------------------------------------------------------------------------------------------
// Negotiation

const SUPPORTED_TYPES = ["application/json", "text/markdown", "text/html"] as const;
type SupportedType = typeof SUPPORTED_TYPES[number];
const supportedList = fc.shuffledSubarray([...SUPPORTED_TYPES], { minLength: 1 }) as fc.Arbitrary<
  [SupportedType, ...SupportedType[]]
>;

Deno.test("preferredType never throws and always returns one of the supported types", async () => {
  await loadNegotiator();
  fc.assert(
    fc.property(fc.option(acceptHeader, { nil: null }), supportedList, (accept, supported) => {
      const chosen = preferredType(accept, supported);
      assert.ok(!(chosen instanceof Promise), "negotiator is loaded: an answer, not a promise");
      assert.ok(supported.includes(chosen), `${JSON.stringify(accept)} -> ${chosen}`);
    }),
    { numRuns: 500 },
  );
});

Deno.test("preferredType picks the highest q, the one listed first on a tie, the default for none", () => {
  // Ties are frequent enough to matter: q drawn from few values.
  const q = fc.oneof(fc.integer({ min: 0, max: 1000 }), fc.constantFrom(0, 500, 1000));
  fc.assert(
    fc.property(q, q, fc.boolean(), (json, markdown, jsonFirst) => {
      const parts = [`application/json;q=${json / 1000}`, `text/markdown;q=${markdown / 1000}`];
      const accept = (jsonFirst ? parts : parts.reverse()).join(", ");
      const expected = markdown > json || (markdown === json && markdown > 0 && !jsonFirst)
        ? "text/markdown"
        : "application/json";
      assert.equal(preferredType(accept, ["application/json", "text/markdown"]), expected, accept);
    }),
    { numRuns: 300 },
  );
});

Deno.test("preferredEncoding never throws and always returns br, gzip or identity", () => {
  fc.assert(
    fc.property(fc.option(acceptEncodingHeader, { nil: null }), (acceptEncoding) => {
      const chosen = preferredEncoding(acceptEncoding);
      assert.ok(!(chosen instanceof Promise), "negotiator is loaded: an answer, not a promise");
      assert.ok(["br", "gzip", "identity"].includes(chosen), `${acceptEncoding} -> ${chosen}`);
    }),
    { numRuns: 500 },
  );
});

Deno.test("preferredEncoding picks the highest q, br then gzip then identity on a tie", () => {
  const q = fc.oneof(fc.integer({ min: 0, max: 1000 }), fc.constantFrom(0, 500, 1000));
  const order: readonly Encoding[] = ["br", "gzip", "identity"];
  fc.assert(
    fc.property(
      fc.record({ br: q, gzip: q, identity: q }),
      fc.shuffledSubarray([...order], { minLength: 3, maxLength: 3 }),
      (weights, listed) => {
        const header = listed.map((e) => `${e};q=${weights[e] / 1000}`).join(", ");
        const best = Math.max(...order.map((e) => weights[e]));
        const expected = best === 0 ? "identity" : order.find((e) => weights[e] === best)!;
        assert.equal(preferredEncoding(header), expected, header);
      },
    ),
    { numRuns: 300 },
  );
});
