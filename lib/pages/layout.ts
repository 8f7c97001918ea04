/**
 * The HTML page layout shared by every page: header with the product name, navigation, main content and
 * a footer with support and the machine-readable alternates.
 *
 * Each page is wrapped once, when first built. The layout loads only the service's own stylesheet,
 * and carries no script, inline style or `style` attribute, so the strict Content-Security-Policy
 * holds. The links
 * of a page (Markdown alternate, OpenAPI description) are built once by {@linkcode pageLinks} and used
 * both for `<link>` elements and for the `Link` response header, so the two cannot disagree.
 *
 * Which links name the public base URL and which do not (issue 25): what the page itself loads (the
 * stylesheet and icon) and the navigation between the portal's pages are path-absolute
 * (`/style.css`, under the base URL's path prefix if it has one), so that a page opened by any name
 * (`127.0.0.1`, a `*.deno.net` or preview URL, a proxy's second name) loads them from its own
 * origin, as its `style-src 'self'` and `img-src 'self'` require, and keeps its reader on that host.
 * They hold no host, so one body still serves every `Host`. The `canonical` link, the typed links
 * that agents follow (`<link>` elements, the `Link` field) and the footer's machine-readable
 * documents stay absolute on the base URL, as the Markdown representations are.
 *
 * @module
 */

import { escapeRegExp } from "./escape.ts";
import { PAGES } from "./site_pages.ts";

/** What the layout needs to know about one page. */
export interface PageMeta {
  /** Path of the page (`/developers`), used for the current-page marker and the canonical URL. */
  path: string;
  /** `<title>`. */
  title: string;
  /** `<meta name="description">`. */
  description: string;
  /**
   * Absolute URL of the page's Markdown representation, if it has one. When it is the page's own URL
   * (Markdown by `Accept: text/markdown`), a browser cannot open it, so the footer says how to ask for it
   * instead of linking it.
   */
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

/** One typed link of a page (RFC 8288). */
export interface PageLink {
  /** Link target, absolute. */
  href: string;
  /** Relation type. */
  rel: string;
  /** Media type of the target. */
  type: string;
}

/** The navigation, in order. */
export const NAV: ReadonlyArray<{ path: string; label: string }> = PAGES.map((
  { path, label },
) => ({ path, label }));

/**
 * Each page's Markdown twin (llmstxt.org: the page's URL with `.md` appended, `index.html.md` for a
 * folder's URL), by the page's path: a plain `fetch` of a twin gets Markdown, no `Accept` needed.
 * `/api`, the alias of `/developers`, has `/api.md` as the alias of its twin.
 */
export const MARKDOWN_TWINS: Readonly<Record<string, string>> = Object.fromEntries(
  PAGES.map(({ path, twin }) => [path, twin]),
);

/**
 * Rewrites the Markdown links of filled Markdown that lead to one of the portal's pages (or the
 * bare base URL) to the page's Markdown twin ({@linkcode MARKDOWN_TWINS}), so that an agent reading
 * Markdown and following a link gets Markdown again. Other links, link texts and code keep theirs.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(
 *   markdownLinksToTwins("[a](https://x.example/developers#b) [c](https://x.example/) [d](https://x.example/openapi.json)", "https://x.example"),
 *   "[a](https://x.example/developers.md#b) [c](https://x.example/index.html.md) [d](https://x.example/openapi.json)",
 * );
 * ```
 */
export function markdownLinksToTwins(markdown: string, baseUrl: string): string {
  const paths = ["", ...Object.keys(MARKDOWN_TWINS)]
    .sort((a, b) => b.length - a.length).map(escapeRegExp).join("|");
  const link = new RegExp(`\\]\\(${escapeRegExp(baseUrl)}(${paths})(?=[)#])`, "g");
  return markdown.replace(link, (_, path: string) => `](${baseUrl}${MARKDOWN_TWINS[path || "/"]}`);
}

/** Path of the stylesheet, relative to the base URL. */
export const STYLESHEET_PATH = "/style.css";

/** Path of the icon, relative to the base URL; linked so browsers do not ask for `/favicon.ico`. */
export const ICON_PATH = "/favicon.svg";

/** Path of the RFC 9727 API catalog (a well-known URI, RFC 8615). */
export const API_CATALOG_PATH = "/.well-known/api-catalog";

/** The media type of the OpenAPI document in links. */
const OPENAPI_TYPE = "application/vnd.oai.openapi+json";

/**
 * The path of the base URL without its trailing slash (`""` for a base URL without one): what a
 * path-absolute link to one of the service's own paths starts with, whatever host the page came by.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(sitePath("https://api.example.com"), "");
 * assert.equal(sitePath("https://example.com/discovery"), "/discovery");
 * ```
 */
export function sitePath(baseUrl: string): string {
  return new URL(baseUrl).pathname.replace(/\/+$/, "");
}

/**
 * Rewrites the links of rendered content (Markdown filled with the base URL) that lead to one of
 * the portal's pages ({@linkcode NAV}, or the bare base URL) to path-absolute links, so that a
 * reader stays on the host they came by. Other links, and the link texts, keep the base URL.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(
 *   pageLinksOnHost('<a href="https://x.example/developers#a">p</a> <a href="https://x.example/openapi.json">o</a>', "https://x.example"),
 *   '<a href="/developers#a">p</a> <a href="https://x.example/openapi.json">o</a>',
 * );
 * ```
 */
export function pageLinksOnHost(html: string, baseUrl: string): string {
  const root = sitePath(baseUrl);
  const paths = ["", ...NAV.map(({ path }) => path)]
    .sort((a, b) => b.length - a.length).map(escapeRegExp).join("|");
  const href = new RegExp(`href="${escapeRegExp(escapeHtml(baseUrl))}(${paths})(?=["#])`, "g");
  return html.replace(href, (_, path: string) => `href="${escapeHtml(root)}${path || "/"}`);
}

/** Escapes text for HTML element content and double-quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;").replaceAll("'", "&#39;");
}

/**
 * The typed links of a page: its Markdown alternate (when it has one), the OpenAPI description and
 * the API catalog.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const site = { name: "X", baseUrl: "https://x", supportUrl: "mailto:s@x.example" };
 * const page = { path: "/developers", title: "", description: "", markdownUrl: "https://x/developers" };
 * assert.deepEqual(pageLinks(page, site).map((link) => link.rel), [
 *   "alternate",
 *   "service-desc",
 *   "api-catalog",
 * ]);
 * ```
 */
export function pageLinks(page: PageMeta, site: Site): PageLink[] {
  const links: PageLink[] = [];
  if (page.markdownUrl) {
    links.push({ href: page.markdownUrl, rel: "alternate", type: "text/markdown" });
  }
  links.push({ href: `${site.baseUrl}/openapi.json`, rel: "service-desc", type: OPENAPI_TYPE });
  links.push(apiCatalogLink(site.baseUrl));
  return links;
}

/**
 * The link to the service's API catalog (RFC 9727 `api-catalog` relation), which the catalog's own
 * responses and every page carry.
 */
export function apiCatalogLink(baseUrl: string): PageLink {
  return {
    href: `${baseUrl}${API_CATALOG_PATH}`,
    rel: "api-catalog",
    type: "application/linkset+json",
  };
}

/**
 * Formats links as the value of a `Link` header field (RFC 8288 section 3).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(
 *   linkHeader([{ href: "https://x/openapi.json", rel: "service-desc", type: "application/vnd.oai.openapi+json" }]),
 *   '<https://x/openapi.json>; rel="service-desc"; type="application/vnd.oai.openapi+json"',
 * );
 * ```
 */
export function linkHeader(links: readonly PageLink[]): string {
  // Hrefs come from the validated base URL (already percent-encoded), so they hold no `>`.
  return links.map(({ href, rel, type }) => `<${href}>; rel="${rel}"; type="${type}"`).join(", ");
}

/**
 * Wraps rendered page content in the layout.
 *
 * @param contentHtml trusted HTML (rendered from the operator's Markdown with raw HTML escaped)
 */
export function renderPage(contentHtml: string, page: PageMeta, site: Site): string {
  const e = escapeHtml;
  const base = site.baseUrl;
  const root = sitePath(base);
  const nav = navItems(page, root);
  const head = pageLinks(page, site).map(({ href, rel, type }) =>
    `<link rel="${e(rel)}" type="${e(type)}" href="${e(href)}">`
  ).join("\n");
  const canonical = page.path ? `<link rel="canonical" href="${e(base + page.path)}">\n` : "";
  const markdown = markdownItem(page, base);
  const support = site.supportUrl.replace(/^mailto:/, "");

  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>${e(page.title)}</title>
<meta name="description" content="${e(page.description)}">
${canonical}<link rel="stylesheet" href="${e(root + STYLESHEET_PATH)}">
<link rel="icon" type="image/svg+xml" href="${e(root + ICON_PATH)}">
${head}
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="site-header"><div class="wrap">
<a class="brand" href="${e(root)}/">${e(site.name)}</a>
<nav aria-label="Main"><ul>
${nav}
</ul></nav>
</div></header>
<main id="main"><div class="wrap">
${pageLinksOnHost(contentHtml, base)}
</div></main>
<footer class="site-footer"><div class="wrap">
<p>Support: <a href="${e(site.supportUrl)}">${e(support)}</a></p>
<nav aria-label="Machine-readable"><ul>
${markdown}
<li><a href="${e(base)}/openapi.json" type="${OPENAPI_TYPE}">OpenAPI document</a></li>
<li><a href="${e(base)}/llms.txt" type="text/plain">llms.txt</a></li>
<li><a href="${
    e(base)
  }/.well-known/api-catalog" type="application/linkset+json">API catalog</a></li>
</ul></nav>
</div></footer>
</body>
</html>
`;
}

/** The main navigation's items, the current page marked; `root` is {@linkcode sitePath}'s. */
function navItems(page: PageMeta, root: string): string {
  return NAV.map(({ path, label }) =>
    `<li><a href="${escapeHtml(root + path)}"${path === page.path ? ' aria-current="page"' : ""}>${
      escapeHtml(label)
    }</a></li>`
  ).join("\n");
}

/** The footer's item pointing to the page's Markdown, if it has one. */
function markdownItem(page: PageMeta, base: string): string {
  if (!page.markdownUrl) return "";
  if (page.markdownUrl !== base + page.path) {
    return `<li><a href="${
      escapeHtml(page.markdownUrl)
    }" type="text/markdown">This page as Markdown</a></li>`;
  }
  // Same URL as the page: only a request with `Accept: text/markdown` gets the Markdown.
  return `<li>This page as Markdown: request it with <code>Accept: text/markdown</code></li>`;
}
