/**
 * The HTML page layout shared by every page: header with the product name, navigation, main content and
 * a footer with support and the machine-readable alternates.
 *
 * Pages are rendered once at start-up. The layout loads nothing from another origin and carries no
 * inline script or style, so the strict Content-Security-Policy holds.
 *
 * @module
 */

/** What the layout needs to know about one page. */
export interface PageMeta {
  /** Path of the page (`/developers`), used for the current-page marker and links. */
  path: string;
  /** `<title>`. */
  title: string;
  /** `<meta name="description">`. */
  description: string;
  /** Absolute URL of the page's Markdown representation, if it has one. */
  markdownUrl?: string;
}

/** Site-wide values of the layout. */
export interface Site {
  /** Product name, shown in the header. */
  name: string;
  /** Public base URL without a trailing slash. */
  baseUrl: string;
  /** Support URI (mailto: or https:). */
  supportUrl: string;
}

/** The navigation, in order. */
export const NAV: ReadonlyArray<{ path: string; label: string }> = [
  { path: "/", label: "Home" },
  { path: "/developers", label: "Developers" },
  { path: "/developers/deprecation-policy", label: "Deprecation policy" },
];

/** Escapes text for HTML element content and double-quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;").replaceAll("'", "&#39;");
}

/**
 * Wraps rendered page content in the layout.
 *
 * @param contentHtml trusted HTML (rendered from the operator's Markdown with raw HTML escaped)
 */
export function renderPage(contentHtml: string, page: PageMeta, site: Site): string {
  const e = escapeHtml;
  const nav = NAV.map(({ path, label }) =>
    `<li><a href="${e(site.baseUrl + path)}"${path === page.path ? ' aria-current="page"' : ""}>${
      e(label)
    }</a></li>`
  ).join("");
  const markdown = page.markdownUrl
    ? `<link rel="alternate" type="text/markdown" href="${e(page.markdownUrl)}">\n`
    : "";
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${e(page.title)}</title>
<meta name="description" content="${e(page.description)}">
${markdown}<link rel="service-desc" type="application/vnd.oai.openapi+json" href="${
    e(site.baseUrl)
  }/openapi.json">
<link rel="api-catalog" href="${e(site.baseUrl)}/.well-known/api-catalog">
</head>
<body>
<header><p class="site"><a href="${e(site.baseUrl)}/">${e(site.name)}</a></p>
<nav aria-label="Main"><ul>${nav}</ul></nav></header>
<main>
${contentHtml}
</main>
<footer>
<p>Support: <a href="${e(site.supportUrl)}">${e(site.supportUrl.replace(/^mailto:/, ""))}</a></p>
<p>Machine-readable: ${
    page.markdownUrl ? `<a href="${e(page.markdownUrl)}" type="text/markdown">Markdown</a> · ` : ""
  }<a href="${e(site.baseUrl)}/openapi.json">OpenAPI</a> · <a href="${
    e(site.baseUrl)
  }/llms.txt">llms.txt</a> · <a href="${
    e(site.baseUrl)
  }/.well-known/api-catalog">API catalog</a></p>
</footer>
</body>
</html>
`;
}
