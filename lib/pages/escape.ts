/**
 * Configuration values escaped for the representation they land in: Markdown text (pages, the
 * Platform's Markdown, `llms.txt`, OpenAPI descriptions), and Markdown's backslash escapes undone
 * for plain text (titles, summaries). HTML is escaped by `layout.ts`'s `escapeHtml` and by `marked`,
 * JSON by `JSON.stringify`, shell words by `api_reference.ts`'s `shellWord`.
 *
 * A configuration value is text, never markup: `PRODUCT_NAME=[x](javascript:alert(2))` must read
 * as those characters wherever it is shown, and give no link, heading, image or list to a browser
 * or to an agent reading the Markdown (lib/config/ refuses new lines and control characters, so
 * a value is one line of text).
 *
 * @module
 */

/**
 * ASCII punctuation with a Markdown meaning somewhere (CommonMark, GFM): every ASCII punctuation
 * character but `, ; : ' - .` and the space, which have none inside a line. (`-` at the start of a
 * line and `.` inside a word are handled apart.)
 */
const MARKDOWN_PUNCTUATION = /[!"#$%&()*+/<=>?@[\\\]^_`{|}~]/g;

/**
 * `text` as Markdown that renders as exactly `text`: each character with a Markdown meaning
 * backslash-escaped (CommonMark escapes any ASCII punctuation), so it opens no link, image,
 * emphasis, code span, HTML tag, entity, table cell, heading, list item or autolink. A `.` inside a
 * word is escaped too (`www.x` would autolink; `1.` starts a list). Text made only of letters,
 * digits, spaces and `, ; : ' -` with a full stop at its end comes back unchanged, so the pages
 * rendered at build time stay valid for such values (`prerender.ts`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(escapeMarkdownText("Acme Legal, Inc."), "Acme Legal, Inc.");
 * assert.equal(
 *   escapeMarkdownText("[x](javascript:alert(2))"),
 *   "\\[x\\]\\(javascript:alert\\(2\\)\\)",
 * );
 * assert.equal(escapeMarkdownText("- 1.5 www.x"), "\\- 1\\.5 www\\.x");
 * assert.equal(escapeMarkdownText("2. # x"), "2\\. \\# x");
 * ```
 */
export function escapeMarkdownText(text: string): string {
  return text
    .replace(MARKDOWN_PUNCTUATION, "\\$&")
    .replace(/\.(?=[^\s])/g, "\\.")
    .replace(/^-/, "\\-")
    .replace(/^(\d+)\.(?=\s|$)/, "$1\\.");
}

/**
 * Markdown text as plain text: backslash escapes undone, a link reduced to its text, emphasis and
 * code marks dropped. For what a page's Markdown gives its `<title>` and `<meta name="description">`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(markdownToPlainText("\\[x\\] and [a *b*](https://x) `c`"), "[x] and a b c");
 * ```
 */
export function markdownToPlainText(markdown: string): string {
  return markdown.replace(
    /\\([!-/:-@[-`{-~])|\[((?:\\.|[^\]\\])*)\]\([^)]*\)|[*_`]/g,
    (whole, escaped: string | undefined, text: string | undefined) => {
      if (escaped !== undefined) return escaped;
      if (text !== undefined) return markdownToPlainText(text);
      return whole === "*" || whole === "_" || whole === "`" ? "" : whole;
    },
  );
}

/**
 * Markdown's backslash escapes undone (`\\[x\\]` is `[x]`), the rest kept: a heading as a page's
 * `<title>`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(unescapeMarkdown("Acme \\<b\\> *x*"), "Acme <b> *x*");
 * ```
 */
export function unescapeMarkdown(markdown: string): string {
  return markdown.replace(/\\([!-/:-@[-`{-~])/g, "$1");
}

/**
 * `text` as a regular expression that matches exactly it: each character with a meaning in a
 * pattern backslash-escaped (`/` too, for a pattern written between slashes).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(escapeRegExp("https://x.example/a?b"), "https:\\/\\/x\\.example\\/a\\?b");
 * assert.ok(new RegExp(`^${escapeRegExp("a.b(c)")}$`).test("a.b(c)"));
 * ```
 */
export function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
}
