/**
 * The service's paths: what each serves (its representations, chosen by `Accept`, and its own header
 * fields), as one {@linkcode PathAnswers} per path, and what an unknown path answers. Built at
 * start-up from the content and the configuration; every answer is built when first needed
 * (`answers.ts`).
 *
 * @module
 */

import type { Config } from "../config/config.ts";
import { errorCatalog, errorMarkdown } from "../errors.ts";
import { once } from "../once.ts";
import type { HeaderField } from "../http/message.ts";
import { buildRepresentation, type Representation } from "../http/representation.ts";
import type { Content, Page, PageFile } from "../pages/content.ts";
import { DEPRECATION_POLICY_PATH, PAGES } from "../pages/site_pages.ts";
import { type BuiltRanks, countTokens } from "../pages/tokens.ts";
import {
  API_CATALOG_PATH,
  apiCatalogLink,
  ICON_PATH,
  linkHeader,
  pageLinks,
  STYLESHEET_PATH,
} from "../pages/layout.ts";
import {
  type Answers,
  COMMON_FIELDS,
  createErrorRenderer,
  type ErrorRenderer,
  type FixedAnswers,
  fixedAnswers,
  HTML_FIELDS,
  type Lazy,
  notFoundAnswers,
  type PathAnswers,
  pathAnswers,
  TYPES,
} from "./answers.ts";

/** The field carrying a Markdown body's size in tokens (`pages/tokens.ts`). */
const TOKENS_FIELD = "x-markdown-tokens";

const NEGOTIATED: HeaderField = ["vary", "Accept, Accept-Encoding"];
const NOT_NEGOTIATED: HeaderField = ["vary", "Accept-Encoding"];

/**
 * Caching of the stylesheet and the icon: unlike the documents, they may be reused for an hour without
 * asking, so a reader moving between pages does not spend requests of their rate limit on them each
 * time; an edited stylesheet reaches every reader within the hour, and the ETag makes the revalidation
 * after it cheap. `private`: they carry the RateLimit fields of the caller who asked (the spec wants
 * the fields on every response), which a shared cache would hand to others (draft -11 section 8.2);
 * the browser's own cache, all the portal needs, keeps them as before (lib/pages/README.md).
 */
const ASSET_CACHE_CONTROL = "private, max-age=3600";

/** The `Link`, `Deprecation` and `Sunset` fields of discovery responses (spec section 9, RFC 9745, RFC 8594). */
export function discoveryFields(config: Config): HeaderField[] {
  const fields: HeaderField[] = [
    [
      "link",
      `<${config.baseUrl}${DEPRECATION_POLICY_PATH}>; rel="deprecation"; type="text/html"`,
    ],
  ];
  if (config.deprecation && config.sunset) {
    fields.push(["deprecation", `@${Math.floor(config.deprecation.getTime() / 1000)}`]);
    fields.push(["sunset", config.sunset.toUTCString()]);
  }
  return fields;
}

/**
 * Builds every path's answers (nothing is rendered here: each answer is built when first needed).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadConfig } from "../config/config.ts";
 * import { recordEnv } from "../config/env.ts";
 * import { DISK_STATIC_FILES } from "../server/static_files.ts";
 * import { loadContent } from "../pages/content.ts";
 * const loaded = loadConfig(recordEnv({}));
 * assert(loaded.ok);
 * const content = loadContent(loaded.config, DISK_STATIC_FILES);
 * assert(content.ok);
 * const answers = buildAnswers(loaded.config, content.content);
 * const platform = await answers.paths.get("/api/v1/platform")!.variant(null, null);
 * assert.equal(platform.get.status, 200);
 * assert.equal((await answers.notFound("text/markdown")).get.status, 404);
 * assert.equal(answers.unknown.preflight.status, 204);
 * ```
 */
export function buildAnswers(config: Config, content: Content): Answers {
  const render = createErrorRenderer(config, content.site);
  // A preflight to an unknown path is granted like any other, so that the page's real request goes
  // on and can read the JSON 404; it has no path fields (Link...) to add. The paths without fields
  // of their own share these answers.
  const unknown = fixedAnswers(render, []);
  // The Markdown 404 is counted with the first Markdown body, and a page and its twin (one text)
  // once, so that the warm-up's counts are all made while the counter is loaded: pages/tokens.ts
  // lets it go once nothing waits to be counted.
  const countOf = (text: string) => countWith(text, content.tokenRanks);
  const notFoundTokens = once(() => countOf(notFoundMarkdown(config)));
  const counted = new Map<string, Promise<number>>();
  const count: Count = (text) => {
    let tokens = counted.get(text);
    if (tokens === undefined) counted.set(text, tokens = countOf(text));
    // Started after this text's, which it does not delay.
    notFoundTokens().catch(() => {});
    return tokens;
  };
  return {
    paths: buildPaths(config, content, { render, shared: unknown, count }),
    unknown,
    notFound: notFoundAnswers(render, {
      markdownFields: async () => [tokensField(await notFoundTokens())],
    }),
  };
}

/** The Markdown body of the 404, as the error renderer writes it (counted for its header field). */
function notFoundMarkdown(config: Config): string {
  return errorMarkdown("not_found", errorCatalog(config).not_found);
}

/** Counts the tokens of a text (`countWith`, with the Markdown 404's count started beside it). */
type Count = (text: string) => Promise<number>;

/** A Markdown representation of a body, with its header fields (`markdownCounted`). */
type MarkdownLazy = (type: string, body: () => string, fields: readonly HeaderField[]) => Lazy;

/** The header field carrying `tokens`. */
function tokensField(tokens: number): HeaderField {
  return [TOKENS_FIELD, String(tokens)];
}

/**
 * The token count of `text`, the ranks found where the platform said (`builtRanks`). The counter
 * is loaded with the paths (about 10 KB of code, nothing run): imported with the first Markdown
 * representation, its loading made the first Markdown response wait up to 3 ms more. Its ranks
 * are read with the first count (lib/README.md, "Cold start").
 */
function countWith(text: string, builtRanks: BuiltRanks | undefined): Promise<number> {
  return countTokens(text, builtRanks ? { builtRanks } : {});
}

/**
 * Every known path and its answers; `render` renders their errors, and the paths without header
 * fields of their own share the fixed answers `shared`.
 */
function buildPaths(
  config: Config,
  content: Content,
  parts: { render: ErrorRenderer; shared: FixedAnswers; count: Count },
): Map<string, PathAnswers> {
  const { render, shared } = parts;
  const markdown = markdownCounted(parts.count);
  const discovery = discoveryFields(config);
  // contentsignals.org: how the content may be used, on every HTML and Markdown response.
  const signal: HeaderField = ["content-signal", config.contentSignal];
  const platform = pathAnswers([
    lazy(TYPES.json, () => content.platformJson, [NEGOTIATED, ...discovery]),
    markdown(TYPES.markdown, () => content.platformMarkdown, [NEGOTIATED, signal, ...discovery]),
  ], fixedAnswers(render, discovery));
  const page = (which: Page, file: PageFile) =>
    pageAnswers(which, content, { file, signal, shared, markdown });
  const twin = (which: Page) =>
    pathAnswers([markdown(TYPES.markdown, () => which.markdown, [NOT_NEGOTIATED, signal])], shared);
  const text = (type: string, body: () => string) =>
    pathAnswers([lazy(type, body, [NOT_NEGOTIATED])], shared);
  const asset = (type: string, body: string) =>
    pathAnswers([lazy(type, () => body, [NOT_NEGOTIATED], ASSET_CACHE_CONTROL)], shared);
  const openapi = text(TYPES.json, () => content.openapi);
  // RFC 9727 section 2: HEAD (and GET) of the catalog answer with a Link of relation api-catalog;
  // its other responses (304, 405, 429...) carry it too, as the path's fields.
  const catalogLink: HeaderField = ["link", linkHeader([apiCatalogLink(config.baseUrl)])];
  const catalog = pathAnswers(
    [lazy(TYPES.linkset, () => content.apiCatalog, [NOT_NEGOTIATED, catalogLink])],
    fixedAnswers(render, [catalogLink]),
  );
  return new Map<string, PathAnswers>([
    ["/api/v1/platform", platform],
    // Each page, then its twin, then each alias and its twin's alias: one answer set per page.
    ...PAGES.flatMap((each): Array<[string, PathAnswers]> => {
      const served = page(content[each.content], each.file);
      const servedTwin = twin(content[each.content]);
      return [each, ...each.aliases].flatMap((at) => [[at.path, served], [at.twin, servedTwin]]);
    }),
    ["/openapi.json", openapi],
    ["/openapi", openapi],
    // llms.txt is Markdown served as text/plain (llmstxt.org): counted and signalled like it.
    [
      "/llms.txt",
      pathAnswers([markdown(TYPES.text, () => content.llms, [NOT_NEGOTIATED, signal])], shared),
    ],
    // Crawlers may index the portal (RFC 9309); counted like every path.
    ["/robots.txt", text(TYPES.text, () => content.robots)],
    ["/sitemap.xml", text(TYPES.xml, () => content.sitemap)],
    [API_CATALOG_PATH, catalog],
    [STYLESHEET_PATH, asset(TYPES.css, content.stylesheet)],
    [ICON_PATH, asset(TYPES.svg, content.icon)],
  ]);
}

/** The type of `type` as offered in negotiation: without parameters. */
function offeredAs(type: string): string {
  return type.split(";")[0]!;
}

/**
 * A representation built the first time it is needed: a page's HTML is rendered from its Markdown
 * then, not at start-up (lib/README.md, "Cold start"). `fields` precede the common ones.
 */
function lazy(
  type: string,
  body: () => string,
  fields: readonly HeaderField[] | (() => readonly HeaderField[]),
  cacheControl?: string,
): Lazy {
  return {
    type: offeredAs(type),
    make: (): Promise<Representation> =>
      buildRepresentation(type, body(), {
        headers: [...(typeof fields === "function" ? fields() : fields), ...COMMON_FIELDS],
        ...(cacheControl === undefined ? {} : { cacheControl }),
      }),
  };
}

/**
 * Markdown representations (and llms.txt) with their token count ({@linkcode TOKENS_FIELD}) by
 * `count`, counted when each is first built: its 200, HEAD and 304 carry the same count.
 */
function markdownCounted(count: Count): MarkdownLazy {
  return (type, body, fields) => ({
    type: offeredAs(type),
    make: async () => {
      const text = body();
      return buildRepresentation(type, text, {
        headers: [...fields, tokensField(await count(text)), ...COMMON_FIELDS],
      });
    },
  });
}

/**
 * A portal page: HTML by default, its Markdown when preferred, both once the page's Markdown is
 * prepared (`marked` may load). HTML pages announce their Markdown alternate and the OpenAPI
 * description in `Link` too, the same links as their `<link>` elements (RFC 8288), for clients that
 * read headers only (HEAD).
 */
function pageAnswers(
  page: Page,
  content: Content,
  options: { file: PageFile; signal: HeaderField; shared: FixedAnswers; markdown: MarkdownLazy },
): PathAnswers {
  return pathAnswers(
    [
      lazy(TYPES.html, () => page.html, () => [
        NEGOTIATED,
        ...HTML_FIELDS,
        options.signal,
        ["link", linkHeader(pageLinks(page.meta, content.site))],
      ]),
      options.markdown(TYPES.markdown, () => page.markdown, [NEGOTIATED, options.signal]),
    ],
    options.shared,
    () => content.prepareMarkdown(options.file),
  );
}
