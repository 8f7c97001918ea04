/**
 * Tests of the pages rendered at build time: the committed templates are current, and filling them
 * gives what `marked` renders from the filled Markdown, for plain values of every placeholder
 * (property-based) and for odd configurations (which fall back to `marked`).
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import { type Config, loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import {
  apiReferenceOf,
  filledPages,
  loadContent,
  PAGE_FILES,
  pageTitle,
  placeholders,
  STATIC_DIR,
  STATIC_FILES,
  summaryOf,
  titleOf,
} from "../../lib/pages/content.ts";
import { markdownLinksToTwins, renderPage } from "../../lib/pages/layout.ts";
import { markdownRenderer } from "../../lib/pages/markdown.ts";
import {
  fillTemplate,
  isPlain,
  PLAIN,
  type Prerendered,
  SENTINELS,
} from "../../lib/pages/prerender.ts";
import { OUTPUT, prerenderedJson } from "../../lib/build/render_pages.ts";
import { DISK_STATIC_FILES } from "../../lib/server/static_files.ts";

/** The shipped static files, by name. */
const RAW: Record<string, string> = Object.fromEntries(
  STATIC_FILES.map((name) => [name, Deno.readTextFileSync(`${STATIC_DIR}/${name}`)]),
);

/** The committed templates. */
const PRERENDERED: Prerendered = JSON.parse(Deno.readTextFileSync(OUTPUT));
const PAGES = PRERENDERED.pages;

function config(env: Parameters<typeof recordEnv>[0]): Config {
  const result = loadConfig(recordEnv(env));
  if (!result.ok) throw new Error(result.errors.join("\n"));
  return result.config;
}

Deno.test("lib/pages/prerendered.json is what `deno task render` writes from static/ and the renderer", async () => {
  const fresh = await prerenderedJson();
  assert.ok(
    Deno.readTextFileSync(OUTPUT) === fresh,
    "lib/pages/prerendered.json is stale (static/*.md, static/openapi.json or the renderer changed): run `deno task render` and commit the result",
  );
});

Deno.test("every sentinel is a plain value of its placeholder, and every placeholder has one", () => {
  assert.deepEqual(Object.keys(SENTINELS).sort(), Object.keys(PLAIN).sort());
  assert.deepEqual(Object.keys(SENTINELS).sort(), Object.keys(placeholders(config({}))).sort());
  for (const [placeholder, sentinel] of Object.entries(SENTINELS)) {
    assert.ok(isPlain(placeholder, sentinel), placeholder);
  }
});

/** A plain value of `placeholder`, drawn from its pattern. */
function plainValue(placeholder: string): fc.Arbitrary<string> {
  return fc.stringMatching(PLAIN[placeholder]!, { size: "small" }).filter((value) =>
    isPlain(placeholder, value)
  );
}

Deno.test("a template filled with plain values is marked's rendering of the Markdown filled with them, and the API reference's the generated one", () => {
  const values = fc.record(
    Object.fromEntries(Object.keys(SENTINELS).map((name) => [name, plainValue(name)])),
  );
  const render = markdownRenderer();
  fc.assert(
    fc.property(values, (drawn) => {
      const filled = filledPages(RAW, drawn);
      const reference = fillTemplate(PRERENDERED.apiReference.parts, drawn);
      assert.equal(reference, apiReferenceOf(RAW, drawn), "the API reference");
      for (const file of PAGE_FILES) {
        const html = fillTemplate(PAGES[file]!.parts, drawn);
        assert.ok(html !== undefined, `${file}: a plain value was refused`);
        assert.equal(html, render(filled[file]), file);
      }
    }),
    { numRuns: 100 },
  );
});

/**
 * Configurations with values that carry Markdown, HTML or URL syntax, and the pages whose template
 * they may fill (the others are rendered by `marked`).
 */
const ODD_CONFIGURATIONS: ReadonlyArray<
  { env: Parameters<typeof recordEnv>[0]; prerendered: readonly string[] }
> = [
  { env: {}, prerendered: PAGE_FILES },
  {
    env: {
      PUBLIC_BASE_URL: "https://api.example.com:8443/legal/discovery",
      PRODUCT_NAME: "Acme Legal 2",
      PRODUCT_DESCRIPTION: "Case law, statutes and filings: searchable",
      SUPPORT_EMAIL: "help.desk+api@acme-legal.co.uk",
      SUPPORT_URL: "https://acme-legal.co.uk/support",
      RATE_LIMIT: "1000",
    },
    prerendered: PAGE_FILES,
  },
  {
    env: {
      PUBLIC_BASE_URL: "https://www.acme-legal.example",
      PRODUCT_DESCRIPTION: "Legal data; see www.",
    },
    prerendered: PAGE_FILES,
  },
  { env: { PUBLIC_BASE_URL: "https://x.example/a_b" }, prerendered: [] },
  { env: { PUBLIC_BASE_URL: "https://x.example/~x/a.b-c_d" }, prerendered: [] },
  { env: { PUBLIC_BASE_URL: "http://[::1]:8080/p_q" }, prerendered: [] },
  { env: { PRODUCT_NAME: 'A<b> & "Sons"' }, prerendered: [] },
  { env: { PRODUCT_NAME: "*Acme* _Legal_" }, prerendered: [] },
  // Its slug is the id of a heading of the home page: marked numbers one of them.
  { env: { PRODUCT_NAME: "Public resources" }, prerendered: PAGE_FILES.slice(1) },
  {
    env: { PRODUCT_DESCRIPTION: "See www.example.com or **bold** <i>x</i>" },
    prerendered: ["deprecation-policy.md"],
  },
  { env: { SUPPORT_EMAIL: "a_b@example.com" }, prerendered: [] },
];

for (const { env, prerendered } of ODD_CONFIGURATIONS) {
  Deno.test(`a page is marked's rendering of its filled Markdown with ${JSON.stringify(env)}`, async () => {
    const loaded = loadContent(
      config({ PUBLIC_BASE_URL: "https://discovery.example.com", ...env }),
      DISK_STATIC_FILES,
    );
    if (!loaded.ok) assert.fail(loaded.errors.join("\n"));
    const content = loaded.content;
    await content.prepareMarkdown();
    const render = markdownRenderer();
    const values = placeholders(
      config({ PUBLIC_BASE_URL: "https://discovery.example.com", ...env }),
    );
    const filled = filledPages(RAW, values);
    for (
      const [file, page] of [
        ["index.md", content.home],
        ["developers.md", content.developers],
        ["deprecation-policy.md", content.deprecationPolicy],
      ] as const
    ) {
      const html = page.html;
      // The HTML is rendered from the filled Markdown; the Markdown served leads to the twins.
      const markdown = filled[file];
      assert.equal(page.markdown, markdownLinksToTwins(markdown, values.base_url!), file);
      assert.equal(page.meta.title, pageTitle(titleOf(markdown), values.name!), file);
      assert.equal(page.meta.description, summaryOf(markdown) ?? values.description, file);
      assert.equal(html, renderPage(render(markdown), page.meta, content.site), file);
      const template = fillTemplate(PAGES[file]!.parts, values);
      assert.equal(template !== undefined, prerendered.includes(file), file);
    }
  });
}
