/**
 * Configuration values cannot inject content (issue 31, item 4): values start-up accepts are text
 * wherever they land (HTML pages, Markdown, llms.txt, the Platform, OpenAPI descriptions, shell
 * examples); values no operator means are refused at start-up.
 *
 * @module
 */

import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import { escapeMarkdownText, markdownToPlainText } from "../../lib/pages/escape.ts";
import { type Content, loadContent } from "../../lib/pages/content.ts";
import { markdownRenderer } from "../../lib/pages/markdown.ts";
import { DISK_STATIC_FILES } from "../../lib/server/static_files.ts";

/** Every body a configuration value can reach, HTML pages rendered. */
async function bodiesOf(env: Parameters<typeof recordEnv>[0]): Promise<Record<string, string>> {
  const loaded = loadConfig(
    recordEnv({ PUBLIC_BASE_URL: "https://discovery.example.com", ...env }),
  );
  if (!loaded.ok) throw new Error(loaded.errors.join("\n"));
  const result = loadContent(loaded.config, DISK_STATIC_FILES);
  if (!result.ok) throw new Error(result.errors.join("\n"));
  const content: Content = result.content;
  await content.prepareMarkdown();
  return {
    "home.html": content.home.html,
    "home.md": content.home.markdown,
    "developers.html": content.developers.html,
    "developers.md": content.developers.markdown,
    "policy.html": content.deprecationPolicy.html,
    "policy.md": content.deprecationPolicy.markdown,
    "llms.txt": content.llms,
    "platform.md": content.platformMarkdown,
    "platform.json": content.platformJson,
    "openapi.json": content.openapi,
  };
}

const HOSTILE_TEXT = [
  "[x](javascript:alert(2))",
  "![i](https://evil.example/i.png)",
  "<img src=https://evil.example/i.png>",
  "# Injected",
  "- item",
  "1. item",
  "&lt;b&gt; *em* _em_ `code` ~~del~~ | cell |",
  "https://evil.example/x www.evil.example",
  "\\[escaped\\]",
  '"; echo pwned; "',
];

Deno.test("text values accepted at start-up are text in every representation: no link, image, heading or tag", async () => {
  for (const value of HOSTILE_TEXT) {
    const bodies = await bodiesOf({ PRODUCT_NAME: value, PRODUCT_DESCRIPTION: `About ${value}` });
    for (const [name, body] of Object.entries(bodies)) {
      const where = `${name} with ${JSON.stringify(value)}`;
      if (name.endsWith(".html")) {
        assert.doesNotMatch(body, /href="javascript:/i, where);
        assert.doesNotMatch(body, /<img/i, where);
        assert.doesNotMatch(body, /href="https:\/\/evil\.example|href="http:\/\/www\.evil/, where);
        assert.doesNotMatch(body, /<h1[^>]*>Injected/, where);
        assert.doesNotMatch(body, /<(em|code|del)>em|<li>item/, where);
      }
      if (name.endsWith(".md") || name === "llms.txt") {
        // Read as Markdown, the value renders as its own characters, nothing more.
        const html = markdownRenderer()(body);
        assert.doesNotMatch(
          html,
          /href="javascript:|<img|href="https:\/\/evil|<h1[^>]*>Injected/i,
          where,
        );
      }
      if (name === "openapi.json") {
        const info = JSON.parse(body).info;
        assert.equal(info.title, `${value} public discovery API`, "a title is no Markdown");
        const html = markdownRenderer()(info.description);
        assert.doesNotMatch(html, /href="javascript:|<img|href="https:\/\/evil/i, where);
      }
      if (name === "platform.json") assert.equal(JSON.parse(body).name, value);
    }
  }
});

Deno.test("escapeMarkdownText() renders back to exactly its text", () => {
  const render = markdownRenderer();
  for (const value of [...HOSTILE_TEXT, "Acme Legal, Inc.", "a.b 2) x", "-- --- ***"]) {
    const html = render(`Before ${escapeMarkdownText(value)} after`);
    const text = html.replace(/<[^>]+>/g, "").replaceAll("&lt;", "<").replaceAll("&gt;", ">")
      .replaceAll("&quot;", '"').replaceAll("&#39;", "'").replaceAll("&amp;", "&").trim();
    assert.equal(text, `Before ${value} after`);
    assert.equal(markdownToPlainText(escapeMarkdownText(value)), value);
  }
});

Deno.test("start-up refuses the values no operator means, each with a sentence naming the variable", () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ PRODUCT_NAME: "Acme\n# Injected" }, /^PRODUCT_NAME must be one line/],
    [{ PRODUCT_DESCRIPTION: "x\u202ey" }, /^PRODUCT_DESCRIPTION must be one line/],
    [{ PRODUCT_NAME: "x".repeat(101) }, /^PRODUCT_NAME must be at most 100 characters/],
    [
      { PUBLIC_BASE_URL: "https://example.com/p)[inj](https://evil.example/x" },
      /^PUBLIC_BASE_URL's path may hold only/,
    ],
    [{ PUBLIC_BASE_URL: "https://example.com/$(id)" }, /^PUBLIC_BASE_URL's path may hold only/],
    [{ PUBLIC_BASE_URL: "https://ex$(id).com" }, /^PUBLIC_BASE_URL must name a host/],
    [{ SUPPORT_URL: 'mailto:"><script>alert(1)</script>' }, /^SUPPORT_URL must be mailto:/],
    [{ SUPPORT_URL: "https://example.com/a)[x](y" }, /^SUPPORT_URL may not hold/],
    [{ DOCUMENTATION_URL: "javascript:alert(1)" }, /^DOCUMENTATION_URL must be an http/],
    [{ DOCUMENTATION_URL: "data:text/html,x" }, /^DOCUMENTATION_URL must be an http/],
    [{ SUPPORT_EMAIL: "sec_[t]*x&y@ex.com" }, /^SUPPORT_EMAIL must be an email address/],
    [{ SUPPORT_EMAIL: "a@localhost" }, /^SUPPORT_EMAIL must be an email address/],
  ];
  for (const [env, sentence] of cases) {
    const result = loadConfig(recordEnv({ PUBLIC_BASE_URL: "https://example.com", ...env }));
    assert.equal(result.ok, false, JSON.stringify(env));
    if (!result.ok) assert.match(result.errors.join("\n"), sentence, JSON.stringify(env));
  }
  for (
    const env of [
      { PUBLIC_BASE_URL: "https://api.example.com:8443/discovery_v1/x~y" },
      { PUBLIC_BASE_URL: "http://[::1]:8000" },
      { SUPPORT_URL: "mailto:api.support+x@example.com" },
      { DOCUMENTATION_URL: "https://docs.example.com/a_b/c?x=1&y=%20#top" },
      { PRODUCT_NAME: "Acme [Legal] <beta> & Co." },
    ]
  ) {
    const result = loadConfig(recordEnv({ PUBLIC_BASE_URL: "https://example.com", ...env }));
    assert.equal(result.ok, true, `${JSON.stringify(env)}: ${result.ok || result.errors}`);
  }
});

Deno.test("the shell examples carry the base URL as it is: its path holds nothing a shell reads", async () => {
  const bodies = await bodiesOf({ PUBLIC_BASE_URL: "https://discovery.example.com/api_x" });
  assert.match(
    bodies["developers.md"]!,
    /^curl -s https:\/\/discovery\.example\.com\/api_x\/api\/v1\/platform$/m,
  );
});
