/**
 * The portal through the handler with real `Request`s: the stylesheet and icon, the pages' `Link`
 * fields and `<link>` elements, the layout's promises (no script, no inline style, one stylesheet),
 * the generated API reference in both representations of `/developers`, and the HTML 404 page.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createHandler, type Handler } from "../lib/handler.ts";
import { loadConfig } from "../lib/config/config.ts";
import { recordEnv } from "../lib/config/env.ts";
import { loadContent } from "../lib/pages/content.ts";
import { linkHeader, pageLinks, renderPage } from "../lib/pages/layout.ts";
import { MemoryStore } from "../lib/limit/memory/memory_store.ts";
import { enableCompression } from "../lib/http/representation.ts";
import { DISK_STATIC_FILES } from "../lib/server/static_files.ts";

// Compressed variants are built once compression is enabled: the service's warm-up enables it 0.5 s
// after start-up; these tests assert codings, so they enable it first (cold_start_imports_test.ts
// tests the identity answers before it).
enableCompression();

const BASE = "https://portal.example";
const INFO = { remoteAddr: { transport: "tcp", hostname: "192.0.2.1", port: 4000 } } as const;

let shared: Handler | undefined;

/** One handler for the file: building the content (brotli at maximum quality) takes a while. */
function handler(): Handler {
  return shared ??= build();
}

function build(): Handler {
  const config = loadConfig(
    recordEnv({ PUBLIC_BASE_URL: BASE, RATE_LIMIT: "1000", ACCESS_LOG: "false" }),
  );
  if (!config.ok) throw new Error(config.errors.join("\n"));
  const content = loadContent(config.config, DISK_STATIC_FILES);
  if (!content.ok) throw new Error(content.errors.join("\n"));
  return createHandler({
    config: config.config,
    content: content.content,
    store: new MemoryStore({ limit: 1000, windowMs: 60_000 }),
    now: () => 1_000_000,
  });
}

async function get(h: Handler, path: string, headers: HeadersInit = {}): Promise<Response> {
  return await h(new Request(BASE + path, { headers }), INFO);
}

const PAGES = ["/", "/developers", "/api", "/developers/deprecation-policy"];

Deno.test("GET /style.css is UTF-8 CSS, cacheable for an hour, with an ETag and the rate-limit fields", async () => {
  const h = handler();
  const response = await get(h, "/style.css");
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "text/css; charset=utf-8");
  assert.equal(response.headers.get("cache-control"), "private, max-age=3600");
  assert.equal(response.headers.get("vary"), "Accept-Encoding");
  assert.match(response.headers.get("etag") ?? "", /^"[A-Za-z0-9_-]+"$/);
  assert.equal(response.headers.get("ratelimit-limit"), "1000");
  assert.match(response.headers.get("ratelimit") ?? "", /^"default";r=\d+;t=\d+$/);
  assert.match(await response.text(), /prefers-color-scheme: dark/);
});

Deno.test("GET /style.css answers gzip and br per Accept-Encoding, and 304 to its ETag", async () => {
  const h = handler();
  for (const coding of ["gzip", "br"]) {
    const response = await get(h, "/style.css", { "accept-encoding": coding });
    await response.body?.cancel();
    assert.equal(response.headers.get("content-encoding"), coding);
  }
  const first = await get(h, "/style.css");
  await first.body?.cancel();
  const again = await get(h, "/style.css", { "if-none-match": first.headers.get("etag")! });
  assert.equal(again.status, 304);
  assert.equal(again.headers.get("cache-control"), "private, max-age=3600");
});

Deno.test("GET /favicon.svg is the SVG icon, cacheable for an hour", async () => {
  const response = await get(handler(), "/favicon.svg");
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "image/svg+xml");
  assert.equal(response.headers.get("cache-control"), "private, max-age=3600");
  assert.match(await response.text(), /^<svg /);
});

Deno.test("HTML pages carry Link to their Markdown, the OpenAPI document and the API catalog, matching their <link> elements", async () => {
  const h = handler();
  const expected: Record<string, string> = {
    "/": `${BASE}/index.html.md`,
    "/developers": `${BASE}/developers.md`,
    "/api": `${BASE}/developers.md`,
    "/developers/deprecation-policy": `${BASE}/developers/deprecation-policy.md`,
  };
  for (const path of PAGES) {
    const response = await get(h, path);
    const html = await response.text();
    const markdown = expected[path]!;
    assert.equal(
      response.headers.get("link"),
      `<${markdown}>; rel="alternate"; type="text/markdown", <${BASE}/openapi.json>; rel="service-desc"; type="application/vnd.oai.openapi+json", <${BASE}/.well-known/api-catalog>; rel="api-catalog"; type="application/linkset+json"`,
      path,
    );
    assert.ok(
      html.includes(`<link rel="alternate" type="text/markdown" href="${markdown}">`),
      path,
    );
    assert.ok(
      html.includes(
        `<link rel="service-desc" type="application/vnd.oai.openapi+json" href="${BASE}/openapi.json">`,
      ),
      path,
    );
  }
});

Deno.test("Markdown representations of the pages carry no page Link; /api/v1/platform keeps its deprecation Link", async () => {
  const h = handler();
  const markdown = await get(h, "/developers", { accept: "text/markdown" });
  await markdown.body?.cancel();
  assert.equal(markdown.headers.get("content-type"), "text/markdown; charset=utf-8");
  assert.equal(markdown.headers.get("link"), null);
  const platform = await get(h, "/api/v1/platform");
  await platform.body?.cancel();
  assert.equal(
    platform.headers.get("link"),
    `<${BASE}/developers/deprecation-policy>; rel="deprecation"; type="text/html"`,
  );
});

Deno.test("every page has its own title and description, one stylesheet, and no script or inline style", async () => {
  const h = handler();
  const titles = new Set<string>();
  for (const path of PAGES.filter((p) => p !== "/api")) {
    const html = await (await get(h, path)).text();
    const title = /<title>([^<]+)<\/title>/.exec(html)?.[1];
    assert.ok(title, path);
    titles.add(title);
    assert.match(html, /<meta name="description" content="[^"]{20,}">/, path);
    assert.equal(html.match(/<link rel="stylesheet"/g)?.length, 1, path);
    // Path-absolute: loaded from the page's own origin by whatever name it was opened (issue 25).
    assert.ok(html.includes('<link rel="stylesheet" href="/style.css">'), path);
    assert.ok(html.includes('<link rel="icon" type="image/svg+xml" href="/favicon.svg">'), path);
    assert.ok(html.includes(`<link rel="canonical" href="${BASE}${path}">`), path);
    assert.doesNotMatch(html, /<script|<style|\sstyle=|\son[a-z]+=/i, path);
  }
  assert.equal(titles.size, 3);
});

Deno.test("/api serves the very HTML of /developers", async () => {
  const h = handler();
  const [a, b] = await Promise.all([get(h, "/api"), get(h, "/developers")]);
  assert.equal(a.headers.get("etag"), b.headers.get("etag"));
  assert.equal(await a.text(), await b.text());
});

Deno.test("/developers carries the generated API reference in HTML and in Markdown", async () => {
  const h = handler();
  const html = await (await get(h, "/developers")).text();
  const markdown = await (await get(h, "/developers", { accept: "text/markdown" })).text();
  assert.ok(markdown.includes("## API reference"));
  assert.ok(
    markdown.includes("curl -s -H 'Accept: text/markdown' https://portal.example/api/v1/platform"),
  );
  assert.ok(!markdown.includes("{{api_reference}}"));
  assert.match(html, /<h2 id="api-reference">API reference<\/h2>/);
  assert.ok(
    html.includes(
      '<pre><code class="language-sh">curl -s -H &#39;Accept: text/markdown&#39; https://portal.example/api/v1/platform\n</code></pre>',
    ),
  );
  // Wide tables scroll in a focusable region (keyboard users can scroll them too), labelled by the
  // heading above and the columns, so that each region has its own name.
  assert.ok(html.includes(
    '<section class="table-scroll" tabindex="0" aria-label="/api/v1/platform: table of Status, Methods, Meaning, Header fields">',
  ));
  const labels = [...html.matchAll(/<section class="table-scroll" [^>]*aria-label="([^"]+)"/g)]
    .map((m) => m[1]);
  assert.ok(labels.length > 13, "the reference has a table per path");
  assert.equal(new Set(labels).size, labels.length, "no two regions share a label");
  assert.match(html, /<h3 id="section-1"><code>\/<\/code><\/h3>/, "the path / gets a non-empty id");
  assert.ok(!html.includes('id=""'));
});

Deno.test("a page's Markdown link is a plain link to its twin", async () => {
  const h = handler();
  const policy = await (await get(h, "/developers/deprecation-policy")).text();
  assert.ok(
    policy.includes(
      `<a href="${BASE}/developers/deprecation-policy.md" type="text/markdown">This page as Markdown</a>`,
    ),
  );
  // Every page has a twin now (issue 33): a browser opens it like any link.
  const developers = await (await get(h, "/developers")).text();
  assert.ok(
    developers.includes(
      `<a href="${BASE}/developers.md" type="text/markdown">This page as Markdown</a>`,
    ),
  );
  assert.ok(!developers.includes("request it with <code>Accept: text/markdown</code>"));
});

Deno.test("the HTML 404 page uses the layout, keeps the strict CSP and links its hint", async () => {
  const response = await get(handler(), "/nope", { accept: "text/html" });
  assert.equal(response.status, 404);
  assert.equal(response.headers.get("content-type"), "text/html; charset=utf-8");
  assert.match(
    response.headers.get("content-security-policy") ?? "",
    /^default-src 'none'; style-src 'self';/,
  );
  const html = await response.text();
  assert.ok(html.includes('<link rel="stylesheet" href="/style.css">'));
  assert.ok(html.includes('<nav aria-label="Main">'));
  assert.ok(html.includes(`<a href="${BASE}/api/v1/platform">${BASE}/api/v1/platform</a>;`));
  assert.ok(html.includes(`<a href="${BASE}/openapi.json">${BASE}/openapi.json</a>. Paths`));
  // The hint's link to the portal keeps a reader on the host they came by; its text names the base.
  assert.ok(html.includes(`<a href="/developers">${BASE}/developers</a> and`));
});

Deno.test("linkHeader() formats the page links as RFC 8288 link-values", () => {
  const site = { name: "N", baseUrl: "https://x.example/base", supportUrl: "mailto:a@b.example" };
  const links = pageLinks({ path: "/p", title: "T", description: "D" }, site);
  assert.equal(
    linkHeader(links),
    '<https://x.example/base/openapi.json>; rel="service-desc"; type="application/vnd.oai.openapi+json", <https://x.example/base/.well-known/api-catalog>; rel="api-catalog"; type="application/linkset+json"',
  );
  const html = renderPage("<h1>T</h1>", { path: "/p", title: "T <&>", description: 'D "q"' }, site);
  assert.ok(html.includes("<title>T &lt;&amp;&gt;</title>"));
  assert.ok(html.includes('<meta name="description" content="D &quot;q&quot;">'));
  assert.ok(html.includes('<link rel="canonical" href="https://x.example/base/p">'));
});
