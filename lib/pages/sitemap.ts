/**
 * `/sitemap.xml` (sitemaps.org protocol 0.9): the portal's pages and their Markdown twins, named by
 * robots.txt's `Sitemap:` line, so that a crawler finds every page and its Markdown without
 * following links. Built from the base URL when first requested; XML-escaped.
 *
 * @module
 */

import { MARKDOWN_TWINS, NAV } from "./layout.ts";

/** Escapes text for XML element content. */
function escapeXml(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;").replaceAll("'", "&apos;");
}

/**
 * The sitemap of the service at `baseUrl`: each page of the navigation, then its twin.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const xml = sitemapXml("https://x.example");
 * assert.match(xml, /<loc>https:\/\/x\.example\/developers\.md<\/loc>/);
 * ```
 */
export function sitemapXml(baseUrl: string): string {
  const urls = NAV.flatMap(({ path }) => [path, MARKDOWN_TWINS[path]])
    .filter((path) => path !== undefined)
    .map((path) => `<url><loc>${escapeXml(baseUrl + path)}</loc></url>`);
  return `<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
${urls.join("\n")}
</urlset>
`;
}
