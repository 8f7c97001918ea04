/**
 * The Markdown renderer of the pages (`marked` with GitHub-style heading ids), in a module of its own
 * so that `marked` is loaded when the first page is built, not at start-up (README, "Cold start").
 *
 * @module
 */

import { Marked, Renderer, type Tokens } from "marked";
import { gfmHeadingId } from "marked-gfm-heading-id";
import { escapeHtml } from "./layout.ts";

/**
 * A Markdown renderer that escapes raw HTML: content can never inject markup or scripts into a page.
 * Headings get GitHub-style ids (linkable sections); tables are wrapped in a labelled, focusable box
 * that scrolls sideways on narrow screens, so keyboard users can scroll it too (WCAG 2.1.1).
 *
 * @example
 * ```ts
 * markdownRenderer()("# Hi <b>"); // '<h1 id="hi-b">Hi &lt;b&gt;</h1>\n'
 * ```
 */
export function markdownRenderer(): (markdown: string) => string {
  const marked = new Marked({ gfm: true }, gfmHeadingId(), {
    renderer: {
      html({ text }) {
        return escapeHtml(text);
      },
      table(this: Renderer, token: Tokens.Table) {
        const label = token.header.map((cell) => cell.text.replaceAll("`", "")).join(", ");
        return `<div class="table-scroll" role="region" tabindex="0" aria-label="${
          escapeHtml(`Table: ${label}`)
        }">\n${Renderer.prototype.table.call(this, token)}</div>\n`;
      },
    },
  });
  return (markdown) => marked.parse(markdown, { async: false });
}
