/**
 * Tests of the paths: every public path, its default and Markdown representations, and the
 * discovery fields (Link, Deprecation, Sunset).
 *
 * @module
 */

import assert from "node:assert/strict";
import { type Config, loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import { loadContent } from "../../lib/pages/content.ts";
import type { PathAnswers } from "../../lib/respond/answers.ts";
import { discoveryFields } from "../../lib/respond/paths.ts";
import { preparedPaths } from "../_server.ts";
import { DISK_STATIC_FILES } from "../../lib/server/static_files.ts";

async function setup(env: Parameters<typeof recordEnv>[0] = {}) {
  const loaded = loadConfig(recordEnv({ PUBLIC_BASE_URL: "https://d.example.com", ...env }));
  if (!loaded.ok) throw new Error(loaded.errors.join("\n"));
  const content = loadContent(loaded.config, DISK_STATIC_FILES);
  if (!content.ok) throw new Error(content.errors.join("\n"));
  return {
    config: loaded.config as Config,
    routes: await preparedPaths(loaded.config, content.content),
  };
}

/** The `Content-Type` of `path`'s answer to `accept`. */
async function typeOf(path: PathAnswers, accept: string | null): Promise<string | undefined> {
  const answer = await path.variant(accept, null);
  return answer.get.fields.find(([name]) => name === "content-type")?.[1];
}

Deno.test("buildAnswers() has every public path with its default and Markdown types", async () => {
  const { routes } = await setup();
  const cases: Array<[string, string, string]> = [
    ["/api/v1/platform", "application/json", "text/markdown; charset=utf-8"],
    ["/developers", "text/html; charset=utf-8", "text/markdown; charset=utf-8"],
    ["/api", "text/html; charset=utf-8", "text/markdown; charset=utf-8"],
    ["/developers/deprecation-policy", "text/html; charset=utf-8", "text/markdown; charset=utf-8"],
    ["/", "text/html; charset=utf-8", "text/markdown; charset=utf-8"],
    [
      "/developers/deprecation-policy.md",
      "text/markdown; charset=utf-8",
      "text/markdown; charset=utf-8",
    ],
    ["/index.html.md", "text/markdown; charset=utf-8", "text/markdown; charset=utf-8"],
    ["/developers.md", "text/markdown; charset=utf-8", "text/markdown; charset=utf-8"],
    ["/api.md", "text/markdown; charset=utf-8", "text/markdown; charset=utf-8"],
    ["/sitemap.xml", "application/xml; charset=utf-8", "application/xml; charset=utf-8"],
    ["/openapi.json", "application/json", "application/json"],
    ["/openapi", "application/json", "application/json"],
    ["/llms.txt", "text/plain; charset=utf-8", "text/plain; charset=utf-8"],
    ["/robots.txt", "text/plain; charset=utf-8", "text/plain; charset=utf-8"],
    ["/style.css", "text/css; charset=utf-8", "text/css; charset=utf-8"],
    ["/favicon.svg", "image/svg+xml", "image/svg+xml"],
    [
      "/.well-known/api-catalog",
      'application/linkset+json; profile="https://www.rfc-editor.org/info/rfc9727"',
      'application/linkset+json; profile="https://www.rfc-editor.org/info/rfc9727"',
    ],
  ];
  assert.deepEqual([...routes.keys()].sort(), cases.map(([path]) => path).sort());
  for (const [path, byDefault, markdown] of cases) {
    const route = routes.get(path)!;
    assert.equal(await typeOf(route, null), byDefault, `${path} default`);
    assert.equal(await typeOf(route, "*/*"), byDefault, `${path} */*`);
    assert.equal(await typeOf(route, "text/markdown"), markdown, `${path} markdown`);
  }
});

Deno.test("aliases share their representation", async () => {
  const { routes } = await setup();
  assert.equal(routes.get("/api"), routes.get("/developers"));
  assert.equal(routes.get("/openapi"), routes.get("/openapi.json"));
});

Deno.test("discoveryFields() links the deprecation policy, and adds Deprecation and Sunset only when announced", async () => {
  const plain = discoveryFields((await setup()).config);
  assert.deepEqual(plain, [[
    "link",
    '<https://d.example.com/developers/deprecation-policy>; rel="deprecation"; type="text/html"',
  ]]);
  const announced = Object.fromEntries(
    discoveryFields(
      (await setup({ DEPRECATION_DATE: "2027-01-01", SUNSET_DATE: "2027-04-01T12:00:00Z" })).config,
    ),
  );
  assert.equal(announced.deprecation, "@1798761600");
  assert.equal(announced.sunset, "Thu, 01 Apr 2027 12:00:00 GMT");
});

Deno.test("the api-catalog is an RFC 9727 linkset with item, service-desc and service-doc", async () => {
  const { routes } = await setup();
  const answer = await routes.get("/.well-known/api-catalog")!.variant(null, null);
  const body = JSON.parse(String(answer.get.body));
  assert.deepEqual(body.linkset[0], {
    anchor: "https://d.example.com/.well-known/api-catalog",
    item: [{ href: "https://d.example.com/api/v1/platform" }],
  });
  assert.equal(body.linkset[1].anchor, "https://d.example.com/api/v1/platform");
  assert.equal(body.linkset[1]["service-desc"][0].href, "https://d.example.com/openapi.json");
  assert.equal(body.linkset[1]["service-doc"][0].href, "https://d.example.com/developers");
  assert.deepEqual(body.linkset[1].deprecation, [
    { href: "https://d.example.com/developers/deprecation-policy", type: "text/html" },
  ]);
});
