/**
 * A fuzz test of the whole handler (issue 31, item 2): fast-check generates methods, paths and
 * header values (random, long, quoted, with control characters, many ranges) and every response
 * must keep the invariants: a status from the documented set and never 500, the Error shape where
 * an error, the rate-limit fields, `Vary` where negotiated, and no input reflected in a body.
 *
 * `FUZZ_RUNS` sets the number of cases (2,000 here, about two seconds; `deno task bench:fuzz` runs 50,000).
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import { createHandler } from "../lib/handler.ts";
import { MemoryStore } from "../lib/limit/memory/memory_store.ts";
import { policyOf } from "../lib/limit/core/decision.ts";
import { testConfig, testContent } from "./_server.ts";

const RUNS = Number(Deno.env.get("FUZZ_RUNS") ?? 2000);
const STATUSES = new Set([200, 204, 304, 400, 404, 405, 429]);
/** Marks generated input, so that a body holding it reflects the request. */
const MARK = "qzxq";

const PATHS = [
  "/",
  "/api/v1/platform",
  "/developers",
  "/api",
  "/developers/deprecation-policy",
  "/developers/deprecation-policy.md",
  "/openapi.json",
  "/llms.txt",
  "/.well-known/api-catalog",
  "/style.css",
];

/** Header-value characters: visible ASCII, space and tab (what `Headers` accepts), biased to the syntax. */
const headerChar = fc.oneof(
  fc.constantFrom(",", ";", "=", '"', "*", "/", "q", " ", "\t", "\\", "W", ":", "[", "]"),
  fc.integer({ min: 0x20, max: 0x7e }).map((code) => String.fromCharCode(code)),
);
const headerValue = fc.oneof(
  fc.string({ unit: headerChar, maxLength: 40 }),
  fc.string({ unit: headerChar, maxLength: 2000 }),
  fc.array(fc.constantFrom("text/markdown", "*/*", "gzip", "br", '"x"', 'W/"y"', "q=0.5", ""), {
    maxLength: 300,
  }).map((parts) => parts.join(",")),
  fc.integer({ min: 1, max: 3000 }).map((n) => `"${",".repeat(n)}`),
).map((value) => value.trim() === "" ? value : `${value}${MARK}`);

const request = fc.record({
  method: fc.constantFrom("GET", "HEAD", "OPTIONS", "POST", "DELETE", "PUT", "PATCH", "TRACE"),
  path: fc.oneof(
    fc.constantFrom(...PATHS),
    fc.string({
      unit: fc.constantFrom("a", "/", ".", "%2e", "%00", "~", "-", "?", "#"),
      maxLength: 60,
    })
      .map((tail) => `/${MARK}${tail}`),
  ),
  headers: fc.dictionary(
    fc.constantFrom(
      "accept",
      "accept-encoding",
      "if-none-match",
      "host",
      "origin",
      "access-control-request-method",
      "x-forwarded-for",
      "forwarded",
    ),
    headerValue,
  ),
});

Deno.test(`fuzz: ${RUNS} generated requests keep every invariant of the handler's responses`, async () => {
  const config = testConfig({ RATE_LIMIT: "1000000", TRUSTED_PROXIES: "192.0.2.0/24" });
  const store = new MemoryStore(policyOf(config), { sweep: false });
  const errors: unknown[] = [];
  const handler = createHandler({
    config,
    content: testContent(config),
    store,
    onError: (error) => errors.push(error),
  });
  try {
    await fc.assert(
      fc.asyncProperty(request, async ({ method, path, headers }) => {
        let built: Request;
        try {
          built = new Request(`http://localhost${path}`, { method, headers });
        } catch {
          return; // a value the runtime itself refuses never reaches the handler
        }
        const response = await handler(built, { remoteAddr: { hostname: "192.0.2.1" } });
        const body = await response.text();
        const where = `${method} ${path} ${JSON.stringify(headers)}`;
        assert.ok(STATUSES.has(response.status), `${response.status} for ${where}`);
        for (
          const field of ["ratelimit-policy", "ratelimit", "ratelimit-limit", "ratelimit-remaining"]
        ) {
          assert.ok(response.headers.has(field), `${field} for ${where}`);
        }
        if (
          method !== "HEAD" && response.status >= 400 &&
          /json/.test(response.headers.get("content-type") ?? "")
        ) {
          const { error } = JSON.parse(body);
          for (const key of ["code", "message", "hint"]) assert.equal(typeof error[key], "string");
        }
        if (response.status === 200 || response.status === 304) {
          assert.match(response.headers.get("vary") ?? "", /Accept-Encoding/i, where);
        }
        assert.ok(!body.includes(MARK), `input reflected for ${where}`);
      }),
      { numRuns: RUNS },
    );
    assert.deepEqual(errors, []);
  } finally {
    store.close();
  }
});
