/**
 * Tests of the per-request choice: given a path's answers (or none) and a decision, the one that
 * answers, in the order the handler's contract sets (429, 400, 404, 304, 200, 204, 405).
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Decision } from "../../lib/limit/decision.ts";
import {
  type Answers,
  createChooser as createAnyChooser,
  type PathAnswers,
  variantResponse,
} from "../../lib/respond/answers.ts";
import { buildAnswers } from "../../lib/respond/paths.ts";
import type { ResponseTemplate } from "../../lib/respond/response_cache.ts";
import { testConfig, testContent } from "../_server.ts";

import { enableCompression } from "../../lib/http/representation.ts";

// Compressed variants are built once compression is enabled, which the service's warm-up does.
enableCompression();

const ADMITTED: Decision = { allowed: true, remaining: 59, resetSeconds: 60 };
const REFUSED: Decision = { allowed: false, remaining: 0, resetSeconds: 12 };

/** Every path's answers, with every representation built (as after the warm-up). */
async function templates(): Promise<Answers> {
  const config = testConfig();
  const answers = buildAnswers(config, testContent(config));
  await Promise.all([...answers.paths.values()].map((path) => path.prepare()));
  return answers;
}

function route(service: Answers, path: string): PathAnswers {
  const found = service.paths.get(path);
  assert.ok(found, path);
  return found;
}

/** The chooser of `service`, for answers that are built: a value, never a promise. */
function createChooser(service: Answers) {
  const choose = createAnyChooser(service);
  return (...args: Parameters<typeof choose>): ResponseTemplate => {
    const chosen = choose(...args);
    assert.ok(!(chosen instanceof Promise), "an answer built already is chosen without waiting");
    return chosen;
  };
}

function request(method: string, headers: Record<string, string> = {}): Request {
  return new Request("http://localhost/any", { method, headers });
}

Deno.test("a refusal answers rate_limited, or rate_limit_unavailable when the store could not decide", async () => {
  const service = await templates();
  const choose = createChooser(service);
  const platform = route(service, "/api/v1/platform");
  const unavailable: Decision = { ...REFUSED, unavailable: true };
  assert.equal(choose(request("GET"), platform, REFUSED), platform.fixed.rateLimited.get);
  assert.equal(choose(request("GET"), platform, unavailable), platform.fixed.unavailable.get);
  assert.equal(choose(request("HEAD"), undefined, REFUSED), service.unknown.rateLimited.head);
});

Deno.test("a refused request is answered 429 before anything else is looked at, unknown paths too", async () => {
  const service = await templates();
  const choose = createChooser(service);
  const bad = request("GET", { host: "bad/host" });
  assert.equal(choose(bad, route(service, "/llms.txt"), REFUSED).status, 429);
  assert.equal(choose(bad, undefined, REFUSED), service.unknown.rateLimited.get);
});

Deno.test("an invalid Host is answered 400 on a known and an unknown path; a valid one is remembered", async () => {
  const service = await templates();
  const choose = createChooser(service);
  const llms = route(service, "/llms.txt");
  assert.equal(choose(request("GET", { host: "a/b" }), llms, ADMITTED), llms.fixed.badRequest.get);
  assert.equal(
    choose(request("HEAD", { host: "a@b" }), undefined, ADMITTED),
    service.unknown.badRequest.head,
  );
  assert.equal(choose(request("GET", { host: "api.example" }), llms, ADMITTED).status, 200);
  assert.equal(choose(request("GET", { host: "api.example" }), llms, ADMITTED).status, 200);
});

Deno.test("an unknown path is answered 404 in the preferred media type, whatever the method", async () => {
  const service = await templates();
  const choose = createChooser(service);
  const markdown = choose(request("DELETE", { accept: "text/markdown" }), undefined, ADMITTED);
  assert.equal(markdown.status, 404);
  assert.ok(
    markdown.fields.some(([name, value]) => name === "content-type" && /markdown/.test(value)),
  );
  const notFound = service.notFound(null);
  assert.ok(!(notFound instanceof Promise));
  assert.equal(choose(request("HEAD"), undefined, ADMITTED), notFound.head);
});

Deno.test("a GET or HEAD gets the variant Accept and Accept-Encoding select, and 304 on a matching ETag", async () => {
  const service = await templates();
  const choose = createChooser(service);
  const platform = route(service, "/api/v1/platform");
  const json = choose(request("GET"), platform, ADMITTED);
  assert.equal(json.status, 200);
  assert.ok(
    json.fields.some(([name, value]) => name === "content-type" && value === "application/json"),
  );
  const markdown = choose(
    request("GET", { accept: "text/markdown", "accept-encoding": "gzip" }),
    platform,
    ADMITTED,
  );
  assert.ok(
    markdown.fields.some(([name, value]) => name === "content-encoding" && value === "gzip"),
  );
  assert.ok(
    markdown.fields.some(([name, value]) => name === "content-type" && /markdown/.test(value)),
  );
  const etag = json.fields.find(([name]) => name === "etag")?.[1];
  assert.ok(etag);
  assert.equal(choose(request("HEAD", { "if-none-match": etag }), platform, ADMITTED).status, 304);
  assert.equal(choose(request("HEAD"), platform, ADMITTED).body, null);
});

Deno.test("variantResponse() answers 304 only when If-None-Match matches the variant's ETag", async () => {
  const service = await templates();
  const variant = await route(service, "/llms.txt").variant(null, null);
  assert.equal(
    variantResponse(request("GET", { "if-none-match": variant.etag }), variant),
    variant.notModified,
  );
  assert.equal(
    variantResponse(request("GET", { "if-none-match": '"other"' }), variant),
    variant.get,
  );
  assert.equal(
    variantResponse(request("GET", { "if-none-match": "*" }), variant),
    variant.notModified,
  );
  assert.equal(variantResponse(request("HEAD"), variant), variant.head);
});

Deno.test("OPTIONS on a known path is its 204, any other method its 405", async () => {
  const service = await templates();
  const choose = createChooser(service);
  const llms = route(service, "/llms.txt");
  assert.equal(choose(request("OPTIONS"), llms, ADMITTED), llms.fixed.preflight);
  assert.equal(choose(request("POST"), llms, ADMITTED), llms.fixed.methodNotAllowed);
  assert.equal(llms.fixed.methodNotAllowed.status, 405);
});
