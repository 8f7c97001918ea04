/**
 * Tests of the wire form of the handler's answers (`lib/respond/wire.ts`): the fields in the order
 * Deno sends them (the template's, the rate-limit fields, `content-length` last, HEAD's too), the
 * same fields and body as the `Response` the `fetch` handler builds for the same answer (every
 * path, and an unexpected failure's 500), and each template's body encoded once. The bytes on a real Node socket against Deno's are held by
 * tests/node/node_wire_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  policyOf,
  rateLimitConstants,
  type RateLimitStore,
} from "../../lib/limit/core/decision.ts";
import { MemoryStore } from "../../lib/limit/memory/memory_store.ts";
import { createHandler } from "../../lib/handler.ts";
import { loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import { buildResponse, type ResponseTemplate } from "../../lib/respond/response_cache.ts";
import { type Answer, createWire, type Wire } from "../../lib/respond/wire.ts";
import { testContent } from "../_server.ts";

const CONSTANTS = { policy: '"default";q=60;w=60', limit: "60" };
const BODY = '{"a":1}';
const OK: ResponseTemplate = {
  status: 200,
  body: BODY,
  fields: [["content-type", "application/json"], ["etag", '"x"']],
};
const HEAD: ResponseTemplate = {
  status: 200,
  body: null,
  fields: [...OK.fields, ["content-length", "7"]],
};
const ADMITTED = { allowed: true, remaining: 12, resetSeconds: 7 };

/**
 * Asserts the wire form of `answered` carries `response`'s fields (as a set: a `Headers` lists them
 * sorted) and its body, with the body's `content-length`, which Deno adds to a `Response`'s.
 */
async function assertWireIsResponse(
  wire: Wire,
  answered: Answer,
  response: Response,
  what: string,
): Promise<void> {
  const flat = wire.fields(answered);
  const pairs = [];
  for (let i = 0; i < flat.length; i += 2) pairs.push([flat[i], flat[i + 1]]);
  const body = wire.body(answered.template);
  const expected = [...response.headers];
  if (body !== null) expected.push(["content-length", String(body.length)]);
  assert.deepEqual(pairs.toSorted(), expected.toSorted(), what);
  assert.deepEqual(body ?? new Uint8Array(), new Uint8Array(await response.arrayBuffer()), what);
}

function answerOf(template: ResponseTemplate, decision = ADMITTED): Answer {
  return { template, decision, outcome: undefined };
}

Deno.test("fields() sends the template's fields, then the rate-limit fields, then content-length", () => {
  const wire = createWire(CONSTANTS);
  assert.deepEqual(wire.fields(answerOf(OK)), [
    ...["content-type", "application/json", "etag", '"x"'],
    ...["ratelimit-policy", '"default";q=60;w=60', "ratelimit", '"default";r=12;t=7'],
    ...["ratelimit-limit", "60", "ratelimit-remaining", "12", "ratelimit-reset", "7"],
    ...["content-length", "7"],
  ]);
});

Deno.test("fields() moves a HEAD template's content-length after the rate-limit fields, as Deno sends it", () => {
  const fields = createWire(CONSTANTS).fields(answerOf(HEAD));
  assert.deepEqual(fields.slice(-4), ["ratelimit-reset", "7", "content-length", "7"]);
  assert.equal(fields.filter((field) => field === "content-length").length, 1);
});

Deno.test("fields() adds Retry-After to a refusal, and returns a new list each call", () => {
  const wire = createWire(CONSTANTS);
  const refused = wire.fields(answerOf(OK, { allowed: false, remaining: 0, resetSeconds: 9 }));
  assert.deepEqual(refused.slice(-4), ["retry-after", "9", "content-length", "7"]);
  refused.push("connection", "close");
  assert.equal(wire.fields(answerOf(OK)).includes("connection"), false);
});

Deno.test("body() is the template's bytes, encoded once and kept", () => {
  const wire = createWire(CONSTANTS);
  const body = wire.body(OK);
  assert.deepEqual(body, new TextEncoder().encode(BODY));
  assert.equal(wire.body(OK), body);
  assert.equal(wire.body(HEAD), null);
  const bytes = new Uint8Array([1, 2, 3]);
  assert.equal(wire.body({ ...OK, body: bytes }), bytes);
});

Deno.test("the handler's answer on the wire carries what its fetch Response carries, for every path", async () => {
  const loaded = loadConfig(recordEnv({}));
  assert.ok(loaded.ok);
  const config = loaded.config;
  const store = new MemoryStore(policyOf(config), { sweep: false });
  const handler = createHandler({ config, content: testContent(config), store });
  const constants = rateLimitConstants(policyOf(config));
  await handler.prepare();
  const targets = ["/api/v1/platform", "/openapi.json", "/llms.txt", "/no/such/path"];
  let caller = 0;
  for (const target of targets) {
    for (const method of ["GET", "HEAD", "OPTIONS", "DELETE"]) {
      const request = new Request(`http://localhost${target}`, { method });
      const info = { remoteAddr: { hostname: `192.0.2.${caller++}` } };
      const answered = await handler.answer(request, info);
      const response = buildResponse(answered.template, answered.decision, constants);
      await assertWireIsResponse(handler.wire, answered, response, `${method} ${target}`);
    }
  }
});

Deno.test("an unexpected failure's 500 on the wire carries what its fetch Response carries", async () => {
  const loaded = loadConfig(recordEnv({}));
  assert.ok(loaded.ok);
  const config = loaded.config;
  const failing: RateLimitStore = {
    hit: () => {
      throw new Error("the store broke");
    },
    peek: () => ({ allowed: true, remaining: 60, resetSeconds: 60 }),
    close: () => {},
  };
  const errors: unknown[] = [];
  const handler = createHandler({
    config,
    content: testContent(config),
    store: failing,
    onError: (error) => errors.push(error),
  });
  const constants = rateLimitConstants(policyOf(config));
  for (const method of ["GET", "HEAD"]) {
    const request = new Request("http://localhost/api/v1/platform", { method });
    const answered = await handler.answer(request, { remoteAddr: { hostname: "192.0.2.1" } });
    assert.equal(answered.template.status, 500);
    const response = buildResponse(answered.template, answered.decision, constants);
    await assertWireIsResponse(handler.wire, answered, response, method);
    const text = new TextDecoder().decode(handler.wire.body(answered.template) ?? new Uint8Array());
    assert.match(text, method === "GET" ? /"internal_error"/ : /^$/, method);
  }
  assert.equal(errors.length, 2);
});
