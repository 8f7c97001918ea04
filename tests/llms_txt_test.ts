/**
 * `/llms.txt` as line-based readers see it: parsed by `llms-txt-parser` (npm), which reads one line
 * per link item as the llmstxt.org reference parser does, and compared with a full Markdown parse
 * (`marked`), which follows wrapped lines. Where the two disagree, a line-based reader gets a note
 * cut short.
 *
 * @module
 */

import assert from "node:assert/strict";
import { marked, type Tokens } from "marked";
import LLMSTextParser from "npm:llms-txt-parser@1.0.2";
import { testConfig, testContent } from "./_server.ts";

/** One link item as a reader sees it. */
interface LinkItem {
  title: string;
  url: string;
  description: string;
}

/** A link item as `llms-txt-parser` returns it. */
interface ParsedLink extends LinkItem {
  section?: string;
}

/** Every link item under an H2 section, read by a full Markdown parser (wrapped lines joined). */
function markdownItems(markdown: string): Array<LinkItem & { section: string }> {
  const items: Array<LinkItem & { section: string }> = [];
  let section = "";
  for (const token of marked.lexer(markdown)) {
    if (token.type === "heading" && token.depth === 2) section = token.text;
    if (token.type !== "list" || section === "") continue;
    for (const item of (token as Tokens.List).items) {
      const match = /^\[([^\]]+)\]\(([^)]+)\)(?::\s*([\s\S]*))?$/.exec(item.text.trim());
      assert.ok(match, `a list item under "${section}" is a link item: ${item.text}`);
      items.push({
        section,
        title: match[1]!,
        url: match[2]!,
        description: (match[3] ?? "").replace(/\s+/g, " ").trim(),
      });
    }
  }
  return items;
}

Deno.test("llms.txt: a line-based parser reads every link item whole (one line per item)", () => {
  const config = testConfig();
  const llms = testContent(config).llms;
  const parsed = new LLMSTextParser().parse(llms) as {
    title?: string;
    overview: string | null;
    links: ParsedLink[];
  };
  assert.equal(parsed.title, config.name);
  assert.ok(parsed.overview?.startsWith(config.description), "the summary follows the title");
  const expected = markdownItems(llms);
  assert.ok(expected.length >= 8, "the sections list the public resources");
  assert.deepEqual(
    parsed.links.map(({ section, title, url, description }) => ({
      section,
      title,
      url,
      description,
    })),
    expected,
  );
  assert.ok(
    parsed.links.some((link) => link.section === "Optional"),
    "an Optional section for what may be skipped",
  );
  for (const link of parsed.links) {
    assert.ok(link.url.startsWith(config.baseUrl) || link.url.startsWith("mailto:"), link.url);
    assert.match(link.description, /[.)]$/, `${link.title}: the note ends its sentence`);
  }
});
