/**
 * Tests of content loading: placeholders filled everywhere, HTML rendered from the same Markdown with
 * raw HTML escaped, and problems in static/ reported at start-up.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { type Config, loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import {
  fill,
  loadContent,
  STATIC_DIR,
  STATIC_FILES,
  summaryOf,
  titleOf,
} from "../../lib/pages/content.ts";
import { DISK_STATIC_FILES } from "../../lib/server/static_files.ts";

function config(env: Parameters<typeof recordEnv>[0] = {}): Config {
  const result = loadConfig(
    recordEnv({ PUBLIC_BASE_URL: "https://discovery.example.com", ...env }),
  );
  if (!result.ok) throw new Error(result.errors.join("\n"));
  return result.config;
}

function realFiles(): Record<string, string> {
  return Object.fromEntries(
    STATIC_FILES.map((name) => [name, Deno.readTextFileSync(join(STATIC_DIR, name))]),
  );
}

function load(files: Record<string, string>, env: Parameters<typeof recordEnv>[0] = {}) {
  return loadContent(config(env), {
    dir: "/static",
    read: (path) => {
      const name = path.split("/").pop()!;
      const text = files[name];
      if (text === undefined) throw new Deno.errors.NotFound(`no such file: ${name}`);
      return text;
    },
  });
}

Deno.test("the API description says the limit is exact unless a shared store runs local-first", () => {
  const descriptionOf = (env: Parameters<typeof recordEnv>[0]) => {
    const result = loadContent(config(env), DISK_STATIC_FILES);
    if (!result.ok) assert.fail(result.errors.join("\n"));
    return JSON.parse(result.content.openapi).info.description as string;
  };
  assert.match(descriptionOf({}), /IPv6 grouped by \/64\), exact sliding window\./);
  assert.match(
    descriptionOf({ RATE_LIMIT_STORE: "kv", RATE_LIMIT_CONSISTENCY: "exact" }),
    /, exact sliding window\./,
  );
  assert.match(
    descriptionOf({ RATE_LIMIT_STORE: "kv", RATE_LIMIT_CONSISTENCY: "local-first" }),
    /a caller may briefly get a few requests more than the limit\./,
  );
});

Deno.test("loadContent() fills every placeholder of the shipped static files", async () => {
  const result = loadContent(config(), DISK_STATIC_FILES);
  if (!result.ok) assert.fail(result.errors.join("\n"));
  const c = result.content;
  await c.prepareMarkdown();
  for (
    const text of [
      c.platformMarkdown,
      c.home.markdown,
      c.home.html,
      c.developers.html,
      c.llms,
      c.openapi,
    ]
  ) {
    assert.doesNotMatch(text, /\{\{/);
  }
  assert.equal(JSON.parse(c.openapi).servers[0].url, "https://discovery.example.com");
  assert.match(c.llms, /https:\/\/discovery\.example\.com\/openapi\.json/);
});

Deno.test("loadContent() builds the Platform object with the seven fields as absolute URIs", () => {
  const result = loadContent(config({ PRODUCT_NAME: "Acme" }), DISK_STATIC_FILES);
  if (!result.ok) assert.fail(result.errors.join("\n"));
  assert.deepEqual(JSON.parse(result.content.platformJson), {
    name: "Acme",
    description: config().description,
    documentation: "https://discovery.example.com/",
    developerResources: "https://discovery.example.com/developers",
    openapi: "https://discovery.example.com/openapi.json",
    agentInstructions: "https://discovery.example.com/llms.txt",
    support: "mailto:support@example.com",
  });
});

Deno.test("loadContent() renders HTML from the same Markdown, with raw HTML escaped", async () => {
  const files = realFiles();
  files["index.md"] =
    "# Home of {{name}}\n\nWelcome <script>alert(1)</script> to **us**.\n\n<div onclick=x>hi</div>\n";
  const result = load(files, { PRODUCT_NAME: "Acme <b>" });
  if (!result.ok) assert.fail(result.errors.join("\n"));
  await result.content.prepareMarkdown();
  const { html, markdown, meta } = result.content.home;
  // The name is text: Markdown-escaped in the Markdown, so that it reads as itself there too.
  assert.match(markdown, /^# Home of Acme \\<b\\>/);
  assert.match(html, /<h1[^>]*>Home of Acme &lt;b&gt;<\/h1>/);
  assert.match(html, /<strong>us<\/strong>/);
  assert.doesNotMatch(html, /<script>|<div onclick|<b>/);
  assert.equal(meta.title, "Home of Acme <b>");
  assert.match(html, /<title>Home of Acme &lt;b&gt;<\/title>/);
});

Deno.test("loadContent() reports unknown placeholders, bad JSON and missing files together", () => {
  const files = realFiles();
  files["developers.md"] = "# {{nmae}}\n{{also_unknown}}";
  files["openapi.json"] = "{ not json";
  delete files["llms.txt"];
  const result = load(files);
  assert.equal(result.ok, false);
  if (result.ok) return;
  assert.equal(result.errors.length, 3);
  assert.ok(
    result.errors.some((e) =>
      /developers\.md uses unknown placeholders \{\{nmae\}\}, \{\{also_unknown\}\}/.test(e)
    ),
  );
  assert.ok(result.errors.some((e) => /openapi\.json is not valid JSON/.test(e)));
  assert.ok(result.errors.some((e) => /llms\.txt could not be read/.test(e)));
});

Deno.test("loadContent() fills openapi.json inside strings only, so values are JSON-escaped", () => {
  const files = realFiles();
  const document = JSON.parse(files["openapi.json"]!);
  document.info.title = '{{name}} "API"';
  files["openapi.json"] = JSON.stringify(document);
  const result = load(files, { PRODUCT_NAME: 'Quote " and \\ backslash' });
  if (!result.ok) assert.fail(result.errors.join("\n"));
  assert.equal(JSON.parse(result.content.openapi).info.title, 'Quote " and \\ backslash "API"');
});

Deno.test("fill(), titleOf() and summaryOf() do what the pages need", () => {
  assert.deepEqual(fill("a {{x}} {{ y }} {{z}}", { x: "1", y: "2" }), {
    text: "a 1 2 {{z}}",
    unknown: ["z"],
  });
  assert.equal(titleOf("intro\n# The *title* #\n\ntext"), "The *title*");
  assert.equal(titleOf("no heading"), undefined);
  assert.equal(
    summaryOf("# T\n\n- list\n\nThe [first](http://x) *real*\nparagraph.\n\nSecond."),
    "The first real paragraph.",
  );
});

Deno.test("loadContent() defers the API reference and the pages' HTML: a reference that cannot be generated fails only the page that uses it", async () => {
  const files = realFiles();
  const openapi = JSON.parse(files["openapi.json"]!);
  openapi.paths["/api/v1/platform"].get.responses["200"] = { $ref: "https://elsewhere.example/x" };
  files["openapi.json"] = JSON.stringify(openapi);
  const result = load(files);
  assert.ok(result.ok, result.ok ? "" : result.errors.join("\n"));
  const content = result.content;
  await content.prepareMarkdown();
  assert.match(content.home.html, /<!doctype html>/i);
  assert.match(content.openapi, /elsewhere\.example/);
  assert.throws(() => content.developers.markdown, /only local references are supported/);
  assert.throws(() => content.developers.html, /only local references are supported/);
});

Deno.test("loadContent() puts the generated API reference where {{api_reference}} stands, in Markdown and HTML", async () => {
  const result = loadContent(config(), DISK_STATIC_FILES);
  assert.ok(result.ok);
  await result.content.prepareMarkdown();
  const { developers } = result.content;
  assert.ok(!developers.markdown.includes("\u0000"));
  assert.ok(!developers.markdown.includes("{{api_reference}}"));
  assert.match(developers.markdown, /curl /);
  assert.match(developers.html, /<code class="language-sh">curl /);
  assert.equal(developers.html, result.content.developers.html);
});

Deno.test("loadContent() loads the pages' renderer only when asked: a page's HTML cannot be read before prepareMarkdown()", async () => {
  const result = loadContent(config(), DISK_STATIC_FILES);
  assert.ok(result.ok);
  const { home } = result.content;
  assert.match(home.markdown, /^# /m);
  assert.throws(() => home.html, /before its renderer was loaded/);
  await result.content.prepareMarkdown();
  assert.match(home.html, /<!doctype html>/i);
});

// A cold start's first request of `/` waits for its page only (lib/README.md, "Cold start"): not
// for the digest of openapi.json (87 KB, twice: the API reference's sources and /developers') nor
// for filling the other pages' templates.
Deno.test("preparing one page digests and fills that page only: / does not wait for openapi.json or the other pages", async () => {
  const result = loadContent(config(), DISK_STATIC_FILES);
  if (!result.ok) assert.fail(result.errors.join("\n"));
  const content = result.content;
  const digested: number[] = [];
  const digest = crypto.subtle.digest;
  crypto.subtle.digest = function (algorithm, data) {
    digested.push((data as Uint8Array).byteLength);
    return digest.call(this, algorithm, data);
  };
  try {
    await content.prepareMarkdown("index.md");
  } finally {
    crypto.subtle.digest = digest;
  }
  const index = new TextEncoder().encode(realFiles()["index.md"]!).byteLength;
  assert.deepEqual(digested, [index], "what was digested to prepare /");
  assert.match(content.home.html, /<main/);
  assert.throws(() => content.developers.html, /before its renderer was loaded/);
  assert.throws(() => content.deprecationPolicy.html, /before its renderer was loaded/);
  await content.prepareMarkdown("developers.md");
  assert.match(content.developers.html, /<main/);
  await content.prepareMarkdown();
  assert.match(content.deprecationPolicy.html, /<main/);
});
