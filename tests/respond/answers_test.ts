/**
 * Tests of the paths' prebuilt answers: one object per path, its variants' answers (200, HEAD's 200,
 * 304) built once, whichever request asks first; the fixed answers (preflight, 405, errors) carrying
 * the path's own fields, shared by the paths without any, each rendered when first read; the 404 in
 * each media type; the error renderer; and the per-request choice: given a path's answers (or none)
 * and a decision, the one that answers, in the order the handler's contract sets (429, 400, 404, 304,
 * 200, 204, 405).
 *
 * @module
 */

import assert from "node:assert/strict";
import { ERROR_CODES } from "../../lib/errors.ts";
import { loadNegotiator } from "../../lib/http/negotiate.ts";
import { buildRepresentation, enableCompression } from "../../lib/http/representation.ts";
import type { Decision } from "../../lib/limit/core/decision.ts";
import {
  type Answers,
  type ChooserOptions,
  createChooser as createAnyChooser,
  createErrorRenderer,
  type PathAnswers,
  variantAnswers,
  variantResponse,
} from "../../lib/respond/answers.ts";
import { buildAnswers } from "../../lib/respond/paths.ts";
import type { ResponseTemplate } from "../../lib/respond/response_cache.ts";
import { testConfig, testContent } from "../_server.ts";

// Compressed variants are built once compression is enabled, which the service's warm-up does.
enableCompression();

// Some Accept values below are negotiated by negotiator, which the service loads after listening.
await loadNegotiator();

const LONG_JSON = JSON.stringify({ items: Array.from({ length: 200 }, (_, i) => ({ i })) });

function build(env: Record<string, string> = {}) {
  const config = testConfig(env);
  return buildAnswers(config, testContent(config));
}

function renderer() {
  const config = testConfig();
  return createErrorRenderer(config, testContent(config).site);
}

Deno.test("a path's fixed answers carry its own fields; an unknown path's carry none", () => {
  const answers = build();
  const platform = answers.paths.get("/api/v1/platform")!;
  const link = platform.fixed.rateLimited.get.fields.find(([name]) => name === "link");
  assert.match(link?.[1] ?? "", /rel="deprecation"/);
  assert.ok(
    platform.fixed.preflight.fields.some(([name]) => name === "access-control-allow-methods"),
  );
  const names = answers.unknown.internalError.get.fields.map(([name]) => name);
  assert.equal(names.includes("link"), false);
  assert.equal(answers.unknown.preflight.status, 204);
});

Deno.test("a 404 is offered in JSON by default, and in Markdown or HTML when preferred", async () => {
  const answers = build();
  const typeOf = async (accept: string | null) =>
    (await answers.notFound(accept)).get.fields.find(([name]) => name === "content-type")?.[1];
  assert.equal(await typeOf(null), "application/json");
  assert.match(await typeOf("text/markdown") ?? "", /^text\/markdown/);
  assert.match(await typeOf("text/html,*/*;q=0.8") ?? "", /^text\/html/);
  assert.equal(answers.notFound("text/html"), answers.notFound("text/html"));
});

Deno.test("a variant's answers are built once, whichever request asks first; a coding that does not compress answers with identity's", async () => {
  const platform = build().paths.get("/api/v1/platform")!;
  const identity = await platform.variant(null, null);
  assert.equal(platform.variant(null, null), identity);
  assert.equal(platform.variant("*/*", "identity"), identity);
  // Compressed in the background once compression is enabled, on first read of the coding.
  await platform.prepare();
  await Promise.all(platform.representations().map((representation) => representation.compress()));
  const gzip = await platform.variant(null, "gzip");
  assert.equal(platform.variant(null, "gzip, deflate"), gzip);
  const tiny = await buildRepresentation("text/plain; charset=utf-8", "hi");
  assert.equal(
    variantAnswers(tiny.variants.gzip!).etag,
    variantAnswers(tiny.variants.identity).etag,
  );
});

Deno.test("variantAnswers(): 200 with the body, HEAD with its length and no body, 304 with no body", async () => {
  const json = await buildRepresentation("application/json", LONG_JSON);
  const identity = variantAnswers(json.variants.identity);
  assert.equal(identity.get.body, LONG_JSON);
  assert.equal(identity.head.body, null);
  assert.deepEqual(identity.head.fields.at(-1), ["content-length", String(LONG_JSON.length)]);
  assert.equal(identity.notModified.status, 304);
  assert.equal(identity.notModified.body, null);
  // A compressed body is kept as bytes, never as text.
  assert.ok(variantAnswers(json.variants.br!).get.body instanceof Uint8Array);
});

/** `config` whose property reads are counted in `reads` (the error texts are built from it). */
function countingReads<T extends object>(config: T): { config: T; reads: () => number } {
  let reads = 0;
  const counted = new Proxy(config, {
    get(target, name, receiver) {
      reads++;
      return Reflect.get(target, name, receiver);
    },
  });
  return { config: counted, reads: () => reads };
}

Deno.test("building the answers renders no error: each is rendered when first read, then kept", () => {
  const plain = testConfig();
  const content = testContent(plain);
  const { config, reads } = countingReads(plain);
  const answers = buildAnswers(config, content);
  const before = reads();
  const platform = answers.paths.get("/api/v1/platform")!;
  const limited = platform.fixed.rateLimited;
  // Cold start: a first 200 needs none of the error answers, so none is rendered before it.
  assert.ok(
    reads() > before,
    "the error text is rendered from the configuration when first needed",
  );
  // Kept: the response cache finds its state by the template object.
  assert.equal(platform.fixed.rateLimited, limited);
  assert.equal(
    answers.paths.get("/llms.txt")!.fixed.methodNotAllowed,
    answers.paths.get("/robots.txt")!.fixed.methodNotAllowed,
  );
  assert.equal(answers.unknown.preflight, answers.unknown.preflight);
  assert.equal(answers.paths.get("/llms.txt")!.fixed.internalError, answers.unknown.internalError);
});

Deno.test("every error code renders in JSON as the Error shape with its status", () => {
  const render = renderer();
  for (const code of ERROR_CODES) {
    const error = render(code, "json");
    const body = JSON.parse(String(error.get.body));
    assert.equal(body.error.code, code);
    assert.ok(error.get.status >= 400, code);
    assert.deepEqual(error.get.fields.slice(0, 2), [
      ["content-type", "application/json"],
      ["cache-control", "no-store"],
    ]);
  }
});

Deno.test("only the 405 names the allowed methods; only HTML carries the content security policy", () => {
  const render = renderer();
  const allow = (code: "method_not_allowed" | "not_found") =>
    render(code, "json").get.fields.find(([name]) => name === "allow")?.[1];
  assert.equal(allow("method_not_allowed"), "GET, HEAD, OPTIONS");
  assert.equal(allow("not_found"), undefined);
  const csp = (type: "html" | "markdown") =>
    render("not_found", type).get.fields.some(([name]) => name === "content-security-policy");
  assert.equal(csp("html"), true);
  assert.equal(csp("markdown"), false);
});

Deno.test("an error's answers add the path's fields; HEAD has no body and the GET body's length", () => {
  const pair = renderer()("not_found", "markdown", [["link", "<x>"]]);
  assert.equal(typeof pair.get.body, "string");
  assert.deepEqual(pair.get.fields.at(-1), ["link", "<x>"]);
  assert.equal(pair.head.body, null);
  const length = new TextEncoder().encode(String(pair.get.body)).length;
  assert.deepEqual(pair.head.fields.at(-1), ["content-length", String(length)]);
});

const ADMITTED: Decision = { allowed: true, remaining: 59, resetSeconds: 60 };
const REFUSED: Decision = { allowed: false, remaining: 0, resetSeconds: 12 };

/** Every path's answers, with every representation built (as after the warm-up). */
async function builtAnswers(): Promise<Answers> {
  const config = testConfig();
  const answers = buildAnswers(config, testContent(config));
  await Promise.all([...answers.paths.values()].map((path) => path.prepare()));
  // The Markdown 404 is built with its token count, by its first request.
  await answers.notFound("text/markdown");
  return answers;
}

function known(service: Answers, path: string): PathAnswers {
  const found = service.paths.get(path);
  assert.ok(found, path);
  return found;
}

/** The chooser of `service`, for answers that are built: a value, never a promise. */
function createChooser(service: Answers, options: ChooserOptions = {}) {
  const choose = createAnyChooser(service, options);
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
  const service = await builtAnswers();
  const choose = createChooser(service);
  const platform = known(service, "/api/v1/platform");
  const unavailable: Decision = { ...REFUSED, unavailable: true };
  assert.equal(choose(request("GET"), platform, REFUSED), platform.fixed.rateLimited.get);
  assert.equal(choose(request("GET"), platform, unavailable), platform.fixed.unavailable.get);
  assert.equal(choose(request("HEAD"), undefined, REFUSED), service.unknown.rateLimited.head);
});

Deno.test("a refused request is answered 429 before anything else is looked at, unknown paths too", async () => {
  const service = await builtAnswers();
  const choose = createChooser(service);
  const bad = request("GET", { host: "bad/host" });
  assert.equal(choose(bad, known(service, "/llms.txt"), REFUSED).status, 429);
  assert.equal(choose(bad, undefined, REFUSED), service.unknown.rateLimited.get);
});

Deno.test("an invalid Host is answered 400 on a known and an unknown path; a valid one is remembered", async () => {
  const service = await builtAnswers();
  const choose = createChooser(service);
  const llms = known(service, "/llms.txt");
  assert.equal(choose(request("GET", { host: "a/b" }), llms, ADMITTED), llms.fixed.badRequest.get);
  assert.equal(
    choose(request("HEAD", { host: "a@b" }), undefined, ADMITTED),
    service.unknown.badRequest.head,
  );
  assert.equal(choose(request("GET", { host: "api.example" }), llms, ADMITTED).status, 200);
  assert.equal(choose(request("GET", { host: "api.example" }), llms, ADMITTED).status, 200);
});

Deno.test("a request without Host is answered 400 when it came to a listener of the service's own and named no host", async () => {
  const service = await builtAnswers();
  const listening = createChooser(service, { listenHostname: "0.0.0.0" });
  const llms = known(service, "/llms.txt");
  // The URL the runtime writes when the request named no host (namesNoHost).
  const named = (url: string) => new Request(url);
  assert.equal(
    listening(named("http://localhost:8000/llms.txt"), llms, ADMITTED),
    llms.fixed.badRequest.get,
  );
  // An absolute-form target or HTTP/2's :authority named one.
  assert.equal(listening(named("http://api.example/llms.txt"), llms, ADMITTED).status, 200);
  // Without a listener of its own (Workers, a Request built in code), no Host is no refusal.
  const choose = createChooser(service);
  assert.equal(choose(named("http://localhost:8000/llms.txt"), llms, ADMITTED).status, 200);
  // An empty Host is not a host, wherever the request came from.
  assert.equal(
    choose(request("GET", { host: "" }), llms, ADMITTED),
    llms.fixed.badRequest.get,
  );
});

Deno.test("a method the service does not recognise is answered 501 on every path; a recognised one 405 or 404", async () => {
  const service = await builtAnswers();
  const choose = createChooser(service);
  const llms = known(service, "/llms.txt");
  // Methods are case-sensitive (RFC 9110 section 9.1): `patch` is not PATCH (`Request` writes
  // `get` as GET, but not `patch`).
  for (const method of ["FOO", "PROPFIND", "patch", "M-SEARCH"]) {
    assert.equal(choose(request(method), llms, ADMITTED), llms.fixed.notImplemented, method);
    assert.equal(choose(request(method), undefined, ADMITTED), service.unknown.notImplemented);
  }
  assert.equal(llms.fixed.notImplemented.status, 501);
  // TRACE and CONNECT as the runtime hands them over: `new Request` refuses them.
  const raw = (method: string) => ({ method, url: "http://localhost/any", headers: new Headers() });
  for (const method of ["POST", "PUT", "DELETE", "PATCH", "TRACE", "CONNECT"]) {
    assert.equal(choose(raw(method), llms, ADMITTED), llms.fixed.methodNotAllowed, method);
    assert.equal(choose(raw(method), undefined, ADMITTED).status, 404, method);
  }
  // Refused first, as every request.
  assert.equal(choose(request("FOO"), llms, REFUSED), llms.fixed.rateLimited.get);
});

Deno.test("OPTIONS * (the path /* as the runtime hands it over) is the server's 204; another method on it 404", async () => {
  const service = await builtAnswers();
  const choose = createChooser(service);
  const asterisk = (method: string) => new Request("http://localhost/*", { method });
  assert.equal(choose(asterisk("OPTIONS"), undefined, ADMITTED), service.unknown.preflight);
  assert.equal(service.unknown.preflight.status, 204);
  assert.equal(choose(asterisk("GET"), undefined, ADMITTED).status, 404);
  assert.equal(choose(asterisk("POST"), undefined, ADMITTED).status, 404);
  const elsewhere = new Request("http://localhost/a/*", { method: "OPTIONS" });
  assert.equal(choose(elsewhere, undefined, ADMITTED).status, 404);
});

Deno.test("an unknown path is answered 404 in the preferred media type, whatever the method", async () => {
  const service = await builtAnswers();
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
  const service = await builtAnswers();
  const choose = createChooser(service);
  const platform = known(service, "/api/v1/platform");
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
  const service = await builtAnswers();
  const variant = await known(service, "/llms.txt").variant(null, null);
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
  const service = await builtAnswers();
  const choose = createChooser(service);
  const llms = known(service, "/llms.txt");
  assert.equal(choose(request("OPTIONS"), llms, ADMITTED), llms.fixed.preflight);
  assert.equal(choose(request("POST"), llms, ADMITTED), llms.fixed.methodNotAllowed);
  assert.equal(llms.fixed.methodNotAllowed.status, 405);
});
