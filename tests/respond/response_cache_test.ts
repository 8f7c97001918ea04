/**
 * Tests of the cache of prebuilt responses: a cached response always carries the fields of the
 * decision it answers, never those of an earlier one; its body can be read on every request; and the
 * cache stays within its bound.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import type { Decision } from "../../lib/limit/decision.ts";
import {
  buildResponse,
  createResponseCache,
  type ResponseTemplate,
  sendableBody,
} from "../../lib/respond/response_cache.ts";

const CONSTANTS = { policy: '"default";q=60;w=60', limit: "60" };
const BODY = new TextEncoder().encode('{"a":1}');
const OK: ResponseTemplate = {
  status: 200,
  body: BODY,
  fields: [["content-type", "application/json"], ["etag", '"x"']],
};
const HEAD: ResponseTemplate = {
  status: 200,
  body: null,
  fields: [...OK.fields, ["content-length", String(BODY.length)]],
};
const REFUSED: ResponseTemplate = {
  status: 429,
  body: new TextEncoder().encode('{"error":{}}'),
  fields: [["content-type", "application/json"], ["cache-control", "no-store"]],
};

async function snapshot(response: Response) {
  return {
    status: response.status,
    headers: [...response.headers],
    body: await response.text(),
  };
}

Deno.test("respond() answers the template's status, fields and body with the decision's rate-limit fields", async () => {
  const cache = createResponseCache(CONSTANTS);
  const decision = { allowed: true, remaining: 12, resetSeconds: 7 };
  const response = cache.respond(OK, decision);
  assert.equal(response.status, 200);
  assert.equal(await response.text(), '{"a":1}');
  assert.equal(response.headers.get("content-type"), "application/json");
  assert.equal(response.headers.get("ratelimit"), '"default";r=12;t=7');
  assert.equal(response.headers.get("ratelimit-policy"), '"default";q=60;w=60');
  assert.equal(response.headers.get("ratelimit-limit"), "60");
  assert.equal(response.headers.get("ratelimit-remaining"), "12");
  assert.equal(response.headers.get("ratelimit-reset"), "7");
  assert.equal(response.headers.get("retry-after"), null);
});

Deno.test("respond() adds Retry-After equal to the reset only to a refused decision", () => {
  const cache = createResponseCache(CONSTANTS);
  const refused = cache.respond(REFUSED, { allowed: false, remaining: 0, resetSeconds: 31 });
  assert.equal(refused.headers.get("retry-after"), "31");
  // The same remaining and reset, admitted (a preflight peek can be refused or not): no Retry-After.
  const admitted = cache.respond(REFUSED, { allowed: true, remaining: 0, resetSeconds: 31 });
  assert.equal(admitted.headers.get("retry-after"), null);
});

Deno.test("respond() answers a repeated decision from the cache, with a body readable every time", async () => {
  const cache = createResponseCache(CONSTANTS);
  const decision = { allowed: true, remaining: 59, resetSeconds: 60 };
  const first = await snapshot(cache.respond(OK, decision));
  const second = await snapshot(cache.respond(OK, decision));
  const third = await snapshot(cache.respond(OK, decision));
  assert.deepEqual(second, first);
  assert.deepEqual(third, first);
  // Built on first sight, built and kept on the second, cloned from then on.
  assert.deepEqual(cache.stats(), { entries: 1, hits: 1, misses: 2, seen: 1 });
});

Deno.test("respond() keeps no response for a decision seen once: a hot caller under a high limit churns nothing", async () => {
  const cache = createResponseCache(CONSTANTS, { maxEntries: 10 });
  const answered: Array<[Decision, Response]> = [];
  for (let remaining = 999_999; remaining > 999_899; remaining--) {
    const decision = { allowed: true, remaining, resetSeconds: 1 };
    answered.push([decision, cache.respond(OK, decision)]);
    assert.equal(cache.stats().entries, 0);
    assert.ok(cache.stats().seen <= 40, "the keys seen once are bounded too");
  }
  assert.equal(cache.stats().misses, 100);
  // Each answer keeps its own values, however many were answered after it.
  for (const [decision, response] of answered) {
    assert.deepEqual(
      await snapshot(response),
      await snapshot(buildResponse(OK, decision, CONSTANTS)),
    );
  }
});

Deno.test("respond() never answers a cached response with another decision's or template's fields", async () => {
  const cache = createResponseCache(CONSTANTS, { maxEntries: 64 });
  const templates = [OK, HEAD, REFUSED];
  const decision = fc.record({
    allowed: fc.boolean(),
    remaining: fc.integer({ min: 0, max: 8 }),
    resetSeconds: fc.integer({ min: 0, max: 8 }),
  });
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.tuple(fc.integer({ min: 0, max: 2 }), decision), {
        minLength: 1,
        maxLength: 200,
      }),
      async (requests) => {
        for (const [which, d] of requests) {
          const template = templates[which]!;
          const got = await snapshot(cache.respond(template, d));
          const expected = await snapshot(buildResponse(template, d, CONSTANTS));
          assert.deepEqual(got, expected);
        }
      },
    ),
    { numRuns: 50 },
  );
  const { hits, entries } = cache.stats();
  assert.ok(hits > 0, "the property exercised cached responses");
  assert.ok(entries <= 64);
});

Deno.test("respond() stays within maxEntries: when full it starts again", () => {
  const cache = createResponseCache(CONSTANTS, { maxEntries: 10 });
  for (let remaining = 0; remaining < 25; remaining++) {
    // Twice each: a response is kept on its second sight.
    cache.respond(OK, { allowed: true, remaining, resetSeconds: 60 });
    cache.respond(OK, { allowed: true, remaining, resetSeconds: 60 });
    assert.ok(cache.stats().entries <= 10, `after ${remaining + 1} decisions`);
  }
  assert.equal(cache.stats().entries, 5);
  // What was dropped is built again, correctly.
  const again = cache.respond(OK, { allowed: true, remaining: 0, resetSeconds: 60 });
  assert.equal(again.headers.get("ratelimit-remaining"), "0");
  assert.equal(cache.stats().misses, 51);
});

Deno.test("respond() does not keep decisions outside the key's exact range, and answers them right", () => {
  const cache = createResponseCache(CONSTANTS);
  const cases: Decision[] = [
    { allowed: true, remaining: 2 ** 20, resetSeconds: 1 },
    { allowed: true, remaining: 1, resetSeconds: 2 ** 17 },
    { allowed: true, remaining: -1, resetSeconds: 1 },
    { allowed: true, remaining: 1.5, resetSeconds: 1 },
  ];
  for (const d of cases) {
    const response = cache.respond(OK, d);
    assert.equal(response.headers.get("ratelimit-remaining"), String(d.remaining));
    assert.equal(response.headers.get("ratelimit-reset"), String(d.resetSeconds));
  }
  assert.deepEqual(cache.stats(), { entries: 0, hits: 0, misses: cases.length, seen: 0 });
});

Deno.test("buildResponse() without a decision sends the template's fields only", () => {
  const response = buildResponse(OK, undefined, CONSTANTS);
  assert.deepEqual([...response.headers].map(([name]) => name), ["content-type", "etag"]);
});

Deno.test("sendableBody() keeps unencoded UTF-8 as text and everything else as bytes", async () => {
  const utf8 = new TextEncoder().encode("Größe: 10 €");
  assert.equal(sendableBody(utf8, false), "Größe: 10 €");
  // The same bytes on the wire either way.
  const sent = new Uint8Array(await new Response(sendableBody(utf8, false)).arrayBuffer());
  assert.deepEqual(sent, utf8);
  assert.equal(sendableBody(utf8, true), utf8, "an encoded body is never text");
  const invalid = new Uint8Array([0x7b, 0xff, 0x7d]);
  assert.equal(sendableBody(invalid, false), invalid, "not UTF-8: bytes");
  const bom = new Uint8Array([0xef, 0xbb, 0xbf, 0x41]);
  assert.deepEqual(new Uint8Array(await new Response(sendableBody(bom, false)).arrayBuffer()), bom);
});
