/**
 * The Markdown renderer of the pages (`marked` with GitHub-style heading ids), in a module of its own
 * so that `marked` is loaded when the first page is built, not at start-up (lib/README.md, "Cold
 * start").
 *
 * @module
 */

import { Marked, Renderer, type Tokens } from "marked";
import { gfmHeadingId } from "marked-gfm-heading-id";
import { escapeHtml } from "./layout.ts";

/**
 * A Markdown renderer that escapes raw HTML: content can never inject markup or scripts into a page.
 * Headings get GitHub-style ids (linkable sections); a heading whose GitHub slug is empty (its text
 * has no letter or digit, like the path `/`) gets `section-<n>` instead of an invalid empty id. Tables
 * are wrapped in a focusable `<section>` that scrolls sideways on narrow screens, so keyboard users
 * can scroll it too (WCAG 2.1.1); its label names the heading above it and the columns, and is made
 * unique on the page, so screen readers can tell the regions apart.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(markdownRenderer()("# Hi <b>"), '<h1 id="hi-b">Hi &lt;b&gt;</h1>\n');
 * ```
 */
export function markdownRenderer(): (markdown: string) => string {
  let heading = "";
  const labels = new Set<string>();
  const marked = new Marked({ gfm: true }, gfmHeadingId(), {
    hooks: {
      preprocess(markdown: string) {
        heading = "";
        labels.clear();
        return markdown;
      },
      postprocess(html: string) {
        let unnamed = 0;
        // marked-gfm-heading-id numbers repeated empty slugs "-1", "-2"...: all are unnamed.
        return html.replace(/<h([1-6]) id="(?:-\d+)?">/g, (_, level) => {
          unnamed += 1;
          return `<h${level} id="section-${unnamed}">`;
        });
      },
    },
    renderer: {
      html({ text }) {
        return escapeHtml(text);
      },
      heading({ text }) {
        heading = text.replaceAll("`", "");
        return false;
      },
      table(this: Renderer, token: Tokens.Table) {
        const columns = token.header.map((cell) => cell.text.replaceAll("`", "")).join(", ");
        const label = uniqueLabel(
          heading ? `${heading}: table of ${columns}` : `Table of ${columns}`,
          labels,
        );
        return `<section class="table-scroll" tabindex="0" aria-label="${escapeHtml(label)}">\n${
          Renderer.prototype.table.call(this, token)
        }</section>\n`;
      },
    },
  });
  return (markdown) => marked.parse(markdown, { async: false });
}

/** `label`, or `label (2)`, `label (3)`... when the page already has it; remembers the result. */
function uniqueLabel(label: string, used: Set<string>): string {
  let unique = label;
  for (let n = 2; used.has(unique); n++) unique = `${label} (${n})`;
  used.add(unique);
  return unique;
}
