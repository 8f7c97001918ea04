/**
 * Tests of the cache of prebuilt responses: a cached response always carries the fields of the
 * decision it answers, never those of an earlier one; its body can be read on every request; and the
 * cache stays within its bound.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import type { Decision } from "../../lib/limit/core/decision.ts";
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
  assert.deepEqual(cache.stats(), { entries: 1, kept: 1, hits: 1, misses: 2, seen: 1 });
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

Deno.test("respond() answers a key seen once with its own reset when it differs from the admitted base's", async () => {
  const cache = createResponseCache(CONSTANTS);
  for (const [remaining, resetSeconds] of [[50, 60], [49, 60], [48, 59], [47, 60], [46, 1]]) {
    const decision = { allowed: true, remaining: remaining!, resetSeconds: resetSeconds! };
    assert.deepEqual(
      await snapshot(cache.respond(OK, decision)),
      await snapshot(buildResponse(OK, decision, CONSTANTS)),
    );
  }
  assert.equal(cache.stats().entries, 0);
});

Deno.test("respond() remembers distinct keys seen once in distinct slots, so that they are kept when they repeat", () => {
  // 500 of a hot caller's keys (a new remaining each) in the default table of 16,384 slots: a hash
  // that spread them badly would remember only a few and keep none when they come back.
  const cache = createResponseCache(CONSTANTS);
  const decisions = Array.from({ length: 500 }, (_, i) => ({
    allowed: true,
    remaining: 999_000 + i,
    resetSeconds: 1,
  }));
  for (const decision of decisions) cache.respond(OK, decision);
  assert.ok(cache.stats().seen >= 475, `${cache.stats().seen} of 500 keys remembered`);
  for (const decision of decisions) cache.respond(OK, decision);
  assert.ok(cache.stats().entries >= 475, `${cache.stats().entries} of 500 repeated keys kept`);
});

Deno.test("respond() keeps a key that repeats although other keys displaced it from the table of keys seen once", async () => {
  // 8 slots: 1,000 keys seen once each displace one another, and none is kept.
  const cache = createResponseCache(CONSTANTS, { maxEntries: 2 });
  for (let remaining = 1000; remaining > 0; remaining--) {
    cache.respond(OK, { allowed: true, remaining, resetSeconds: 60 });
  }
  assert.equal(cache.stats().entries, 0);
  assert.ok(cache.stats().seen <= 8);
  // A key seen twice in a row is kept, then answered from the cache.
  const decision = { allowed: true, remaining: 0, resetSeconds: 60 };
  for (let i = 0; i < 3; i++) {
    assert.deepEqual(
      await snapshot(cache.respond(OK, decision)),
      await snapshot(buildResponse(OK, decision, CONSTANTS)),
    );
  }
  assert.equal(cache.stats().entries, 1);
  assert.equal(cache.stats().hits, 1);
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
  // Each key twice (kept on its second sight), with enough answers between keys (a kept key's hits)
  // that the keep budget never runs out: only the bound on entries limits what is kept.
  const kept = { allowed: true, remaining: 1000, resetSeconds: 60 };
  for (let remaining = 0; remaining < 25; remaining++) {
    cache.respond(OK, { allowed: true, remaining, resetSeconds: 60 });
    cache.respond(OK, { allowed: true, remaining, resetSeconds: 60 });
    for (let i = 0; i < 256; i++) cache.respond(OK, kept);
    assert.ok(cache.stats().entries <= 10, `after ${remaining + 1} decisions`);
  }
  assert.ok(cache.stats().entries < 10, "the cache started again when full");
  // What was dropped is answered again, correctly.
  const again = cache.respond(OK, { allowed: true, remaining: 0, resetSeconds: 60 });
  assert.equal(again.headers.get("ratelimit-remaining"), "0");
});

Deno.test("respond() keeps at most min(maxEntries, 512) responses plus one per 256 answered: a drifting hot caller keeps few", async () => {
  const cache = createResponseCache(CONSTANTS, { maxEntries: 16 });
  // A hot caller's remaining drifting downwards, each value answered twice: every key is seen twice.
  let answered = 0;
  for (let remaining = 999_999; remaining > 989_999; remaining--) {
    const decision = { allowed: true, remaining, resetSeconds: 1 };
    for (let i = 0; i < 2; i++) {
      assert.deepEqual(
        await snapshot(cache.respond(OK, decision)),
        await snapshot(buildResponse(OK, decision, CONSTANTS)),
      );
      answered++;
    }
  }
  const { hits } = cache.stats();
  // Every kept response was kept on a second sight and never seen again: no hits, and at most the
  // budget kept (16, then one per 256 answers), not one per key (10,000).
  assert.equal(hits, 0);
  const keptAtMost = 16 + Math.floor(answered / 256);
  assert.ok(cache.stats().kept <= keptAtMost, `${cache.stats().kept} kept, at most ${keptAtMost}`);
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
  assert.deepEqual(cache.stats(), { entries: 0, kept: 0, hits: 0, misses: cases.length, seen: 0 });
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

Deno.test("with keep: false (Workers) every request gets a Response of its own, equal to one built", async () => {
  const constants = { policy: '"default";q=60;w=60', limit: "60" };
  const cache = createResponseCache(constants, { keep: false });
  const template = {
    status: 200,
    body: "{}",
    fields: [["content-type", "application/json"]],
  } as const;
  const decision = { allowed: true, remaining: 59, resetSeconds: 60 };
  const responses = [1, 2, 3].map(() => cache.respond(template, decision));
  assert.equal(new Set(responses).size, 3);
  const reference = buildResponse(template, decision, constants);
  for (const response of responses) {
    assert.deepEqual([...response.headers], [...reference.headers]);
    assert.equal(await response.text(), "{}");
  }
  await reference.body?.cancel();
  assert.deepEqual(cache.stats(), { entries: 0, kept: 0, hits: 0, misses: 3, seen: 0 });
});
