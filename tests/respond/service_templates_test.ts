/**
 * Tests of the service's templates: one per path of the route table, the unknown path's
 * without a route's fields, each built when first read and never twice.
 *
 * @module
 */

import assert from "node:assert/strict";
import { buildServiceTemplates } from "../../lib/respond/service_templates.ts";
import { preparedRoutes, testConfig, testContent } from "../_server.ts";
import { loadNegotiator } from "../../lib/http/negotiate.ts";

import { enableCompression } from "../../lib/http/representation.ts";

// Compressed variants are built once compression is enabled, which the service's warm-up does.
enableCompression();

// Some Accept values below are negotiated by negotiator, which the service loads after listening.
await loadNegotiator();

async function build(env: Record<string, string> = {}) {
  const config = testConfig(env);
  const content = testContent(config);
  const table = await preparedRoutes(config, content);
  return { table, templates: buildServiceTemplates(config, { site: content.site, routes: table }) };
}

Deno.test("every path of the route table has its templates, carrying the route's own fields", async () => {
  const { table, templates } = await build();
  assert.deepEqual([...templates.routes.keys()], [...table.keys()]);
  const platform = templates.routes.get("/api/v1/platform")!;
  const link = platform.rateLimited.get.fields.find(([name]) => name === "link");
  assert.match(link?.[1] ?? "", /rel="deprecation"/);
  assert.ok(platform.preflight.fields.some(([name]) => name === "access-control-allow-methods"));
});

Deno.test("the unknown path's templates carry no route field", async () => {
  const { templates } = await build();
  const names = templates.unknownPath.internalError.get.fields.map(([name]) => name);
  assert.equal(names.includes("link"), false);
  assert.equal(templates.unknownPath.preflight.status, 204);
});

Deno.test("a 404 is offered in JSON by default, and in Markdown or HTML when preferred", async () => {
  const { templates } = await build();
  const typeOf = (accept: string | null) =>
    templates.notFound(accept).get.fields.find(([name]) => name === "content-type")?.[1];
  assert.equal(typeOf(null), "application/json");
  assert.match(typeOf("text/markdown") ?? "", /^text\/markdown/);
  assert.match(typeOf("text/html,*/*;q=0.8") ?? "", /^text\/html/);
  assert.equal(templates.notFound("text/html"), templates.notFound("text/html"));
});

Deno.test("a variant's templates are built once, whichever request asks first", async () => {
  const { templates } = await build();
  const platform = templates.routes.get("/api/v1/platform")!;
  const set = platform.pick(null);
  assert.equal(platform.pick(null), set);
  const gzip = templates.variant(set, "gzip");
  assert.equal(templates.variant(set, "gzip, deflate"), gzip);
  assert.equal(set.gzip, gzip);
  assert.equal(templates.variant(set, null), set.identity);
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

Deno.test("building the templates renders no error: each is rendered when first read, then kept", async () => {
  const plain = testConfig();
  const content = testContent(plain);
  const table = await preparedRoutes(plain, content);
  const { config, reads } = countingReads(plain);
  const templates = buildServiceTemplates(config, { site: content.site, routes: table });
  // Cold start: a first 200 needs none of the error templates, so none is rendered before it.
  assert.equal(reads(), 0);
  const platform = templates.routes.get("/api/v1/platform")!;
  const limited = platform.rateLimited;
  assert.ok(reads() > 0, "the error text is rendered from the configuration when first needed");
  // Kept: the response cache finds its state by the template object.
  assert.equal(platform.rateLimited, limited);
  assert.equal(
    templates.routes.get("/llms.txt")!.methodNotAllowed,
    templates.routes.get("/robots.txt")!.methodNotAllowed,
  );
  assert.equal(templates.unknownPath.preflight, templates.unknownPath.preflight);
  assert.equal(
    templates.routes.get("/llms.txt")!.internalError,
    templates.unknownPath.internalError,
  );
});
