/**
 * Tests of the templates built at start-up: one per path of the route table, the unknown path's
 * without a route's fields, and nothing built twice.
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
