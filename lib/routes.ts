/**
 * The route table: every public path, its representations and the header fields of its responses,
 * built once at start-up from the content and the configuration.
 *
 * A route answers GET and HEAD with one of its representations, chosen by `Accept`; everything else
 * about a request (rate limit, 304, 405, OPTIONS) is decided by the handler (`handler.ts`) and the
 * per-request choice (`respond/choose.ts`).
 *
 * @module
 */

import type { Config } from "./config.ts";
import type { HeaderField } from "./http/message.ts";
import type { Content, Page, PageFile } from "./pages/content.ts";
import { once } from "./once.ts";
import {
  API_CATALOG_PATH,
  apiCatalogLink,
  ICON_PATH,
  linkHeader,
  pageLinks,
  STYLESHEET_PATH,
} from "./pages/layout.ts";
import { memoize, preferredType } from "./http/negotiate.ts";
import { buildRepresentation, type Representation } from "./http/representation.ts";

/**
 * Thrown by {@linkcode Route.pick} when the chosen representation is a Markdown one not built yet:
 * its token count waits for the tokenizer, which the path's first request and the warm-up do not
 * load (`pages/tokens.ts`). The handler answers once `until` has resolved, with the same decision.
 */
export class RepresentationPendingError extends Error {
  /** Resolves once the representation is built. */
  readonly until: Promise<unknown>;
  constructor(until: Promise<unknown>) {
    super("a Markdown representation is being built (its tokens counted)");
    this.until = until;
  }
}

/** One public path. */
export interface Route {
  /**
   * The representation for an `Accept` value (memoised); only once `prepare()` has resolved. A
   * negotiated Markdown representation not built yet throws {@linkcode RepresentationPendingError}.
   */
  pick: (accept: string | null) => Representation;
  /** The representations of the path built so far (for warming up); once `prepare()` has resolved. */
  representations: () => Representation[];
  /**
   * Builds the path's representations, once (their ETags are digests from Web Crypto, asynchronous;
   * pages wait for `marked` first). The first request of a path waits for it.
   */
  prepare: () => Promise<void>;
  /** Builds every representation of the path, once: `prepare()`'s and the Markdown ones (tests). */
  prepareAll: () => Promise<void>;
  /**
   * Whether `handler.ready` builds it (with `prepareAll()`): all but the pages, whose `prepare()`
   * may import `marked`.
   */
  eager: boolean;
  /** Fields on every response of this path, errors included (Link, Deprecation, Sunset). */
  fields: readonly HeaderField[];
}

/** The field carrying a Markdown body's size in tokens (`pages/tokens.ts`). */
export const TOKENS_FIELD = "x-markdown-tokens";

/** The methods every route allows. */
export const ALLOWED_METHODS = "GET, HEAD, OPTIONS";

/** Fields on every response of the service. */
export const COMMON_FIELDS: readonly HeaderField[] = [
  ["x-content-type-options", "nosniff"],
  ["access-control-allow-origin", "*"],
  [
    "access-control-expose-headers",
    "RateLimit, RateLimit-Policy, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Retry-After, Link, Deprecation, Sunset, ETag",
  ],
];

/** Fields of every HTML response: nothing runs, nothing loads from elsewhere, no framing. */
export const HTML_FIELDS: readonly HeaderField[] = [
  [
    "content-security-policy",
    "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  ],
  ["referrer-policy", "no-referrer"],
];

/** Media types, with the parameters the service sends. */
export const TYPES = {
  json: "application/json",
  markdown: "text/markdown; charset=utf-8",
  html: "text/html; charset=utf-8",
  text: "text/plain; charset=utf-8",
  css: "text/css; charset=utf-8",
  svg: "image/svg+xml",
  linkset: 'application/linkset+json; profile="https://www.rfc-editor.org/info/rfc9727"',
  xml: "application/xml; charset=utf-8",
} as const;

const NEGOTIATED: HeaderField = ["vary", "Accept, Accept-Encoding"];
const NOT_NEGOTIATED: HeaderField = ["vary", "Accept-Encoding"];

/**
 * Caching of the stylesheet and the icon: unlike the documents, they may be reused for an hour without
 * asking, so a reader moving between pages does not spend requests of their rate limit on them each
 * time; an edited stylesheet reaches every reader within the hour, and the ETag makes the revalidation
 * after it cheap.
 */
export const ASSET_CACHE_CONTROL = "public, max-age=3600";

/** The `Link`, `Deprecation` and `Sunset` fields of discovery responses (spec section 9, RFC 9745, RFC 8594). */
export function discoveryFields(config: Config): HeaderField[] {
  const fields: HeaderField[] = [
    [
      "link",
      `<${config.baseUrl}/developers/deprecation-policy>; rel="deprecation"; type="text/html"`,
    ],
  ];
  if (config.deprecation && config.sunset) {
    fields.push(["deprecation", `@${Math.floor(config.deprecation.getTime() / 1000)}`]);
    fields.push(["sunset", config.sunset.toUTCString()]);
  }
  return fields;
}

/**
 * Builds the route table.
 *
 * @returns a map from exact path (case-sensitive, no trailing slash) to route
 */
export function buildRoutes(config: Config, content: Content): Map<string, Route> {
  const discovery = discoveryFields(config);
  // contentsignals.org: how the content may be used, on every HTML and Markdown response.
  const signal: HeaderField = ["content-signal", config.contentSignal];
  const platform = negotiatedRoute(
    lazyRepresentation(TYPES.json, () => content.platformJson, () => [NEGOTIATED, ...discovery]),
    markdownRepresentation(
      TYPES.markdown,
      () => content.platformMarkdown,
      () => [NEGOTIATED, signal, ...discovery],
    ),
    "application/json",
    discovery,
  );
  const page = (which: Page, file: PageFile) => pageRoute(which, content, { file, signal });
  const twin = (which: Page) =>
    markdownRoute(TYPES.markdown, () => which.markdown, [NOT_NEGOTIATED, signal]);
  const developers = page(content.developers, "developers.md");
  const developersTwin = twin(content.developers);
  const openapi = textRoute(TYPES.json, () => content.openapi);
  // RFC 9727 section 2: HEAD (and GET) of the catalog answer with a Link of relation api-catalog;
  // its other responses (304, 405, 429...) carry it too, as route fields.
  const catalogLink: HeaderField = ["link", linkHeader([apiCatalogLink(config.baseUrl)])];
  const catalog = lazyRepresentation(
    TYPES.linkset,
    () => content.apiCatalog,
    () => [NOT_NEGOTIATED, catalogLink],
  );
  return new Map<string, Route>([
    ["/api/v1/platform", platform],
    ["/", page(content.home, "index.md")],
    ["/index.html.md", twin(content.home)],
    ["/developers", developers],
    ["/developers.md", developersTwin],
    ["/api", developers],
    ["/api.md", developersTwin],
    ["/developers/deprecation-policy", page(content.deprecationPolicy, "deprecation-policy.md")],
    ["/developers/deprecation-policy.md", twin(content.deprecationPolicy)],
    ["/openapi.json", openapi],
    ["/openapi", openapi],
    // llms.txt is Markdown served as text/plain (llmstxt.org): counted and signalled like it.
    ["/llms.txt", markdownRoute(TYPES.text, () => content.llms, [NOT_NEGOTIATED, signal])],
    // Crawlers may index the portal (RFC 9309); counted like every path.
    ["/robots.txt", textRoute(TYPES.text, () => content.robots)],
    ["/sitemap.xml", textRoute(TYPES.xml, () => content.sitemap)],
    [API_CATALOG_PATH, fixedRoute(catalog, [catalogLink])],
    [STYLESHEET_PATH, fixedRoute(assetRepresentation(TYPES.css, content.stylesheet))],
    [ICON_PATH, fixedRoute(assetRepresentation(TYPES.svg, content.icon))],
  ]);
}

/** A representation built once by `build()` and read by `get()` after that has resolved. */
interface Deferred {
  /**
   * The built representation; before `build()` has resolved, throws (a Markdown one
   * {@linkcode RepresentationPendingError}, having started `build()`).
   */
  get: () => Representation;
  /** The built representation, or `undefined` before `build()` has resolved. */
  built: () => Representation | undefined;
  /** Builds the representation, once. */
  build: () => Promise<Representation>;
}

/** The {@linkcode Deferred} of what `make` builds; `pending` when it may be read before. */
function deferred(make: () => Promise<Representation>, pending = false): Deferred {
  let built: Representation | undefined;
  const build = once(async () => built = await make());
  return {
    get: () => {
      if (built !== undefined) return built;
      if (pending) throw new RepresentationPendingError(build());
      throw new Error("a representation was read before it was built");
    },
    built: () => built,
    build,
  };
}

/**
 * A Markdown representation (or llms.txt) built the first time it is needed, with its token count
 * ({@linkcode TOKENS_FIELD}) counted then, once: its 200, HEAD and 304 carry the same count.
 */
function markdownRepresentation(
  type: string,
  body: () => string,
  fields: () => readonly HeaderField[],
): Deferred {
  return deferred(async () => {
    // Imported, not loaded with the routes: the bundle keeps it apart, and it starts itself as a
    // worker that loads the tokenizer (lib/README.md, "Cold start").
    const { countTokens } = await import("./pages/tokens.ts");
    const text = body();
    const tokens = await countTokens(text);
    return buildRepresentation(type, text, {
      headers: [...fields(), [TOKENS_FIELD, String(tokens)], ...COMMON_FIELDS],
    });
  }, true);
}

/**
 * A representation built the first time its path is prepared: a page's HTML is rendered from its
 * Markdown then, not at start-up (lib/README.md, "Cold start").
 */
function lazyRepresentation(
  type: string,
  body: () => string,
  fields: () => readonly HeaderField[],
): Deferred {
  return deferred(() =>
    buildRepresentation(type, body(), { headers: [...fields(), ...COMMON_FIELDS] })
  );
}

/** The stylesheet or the icon: not negotiated, cached for an hour ({@linkcode ASSET_CACHE_CONTROL}). */
function assetRepresentation(type: string, body: string): Deferred {
  return deferred(() =>
    buildRepresentation(type, body, {
      headers: [NOT_NEGOTIATED, ...COMMON_FIELDS],
      cacheControl: ASSET_CACHE_CONTROL,
    })
  );
}

/** A path with one representation. */
function fixedRoute(representation: Deferred, fields: readonly HeaderField[] = []): Route {
  const prepare = once(async () => {
    await representation.build();
  });
  return {
    pick: representation.get,
    representations: () => [representation.get()],
    prepare,
    prepareAll: prepare,
    eager: true,
    fields,
  };
}

/** A path of one text file, not negotiated. */
function textRoute(type: string, body: () => string): Route {
  return fixedRoute(lazyRepresentation(type, body, () => [NOT_NEGOTIATED]));
}

/** A path of one Markdown text, not negotiated: its first request loads the tokenizer. */
function markdownRoute(type: string, body: () => string, fields: readonly HeaderField[]): Route {
  return fixedRoute(markdownRepresentation(type, body, () => fields));
}

/** A path with a default representation and a Markdown one, chosen by `Accept`. */
function negotiatedRoute(
  defaultRep: Deferred,
  markdownRep: Deferred,
  defaultType: string,
  fields: readonly HeaderField[] = [],
  before?: () => Promise<void>,
): Route {
  const byType: Record<string, Deferred> = {
    [defaultType]: defaultRep,
    "text/markdown": markdownRep,
  };
  const choose = memoize((accept) =>
    byType[preferredType(accept, [defaultType, "text/markdown"])]!.get()
  );
  const prepare = once(async () => {
    await before?.();
    await defaultRep.build();
  });
  return {
    pick: choose,
    representations: () =>
      [defaultRep.built(), markdownRep.built()].filter((built) => built !== undefined),
    // The Markdown one is built when first chosen (RepresentationPendingError): its token count
    // needs the tokenizer, which a first request for the default must not wait for.
    prepare,
    prepareAll: once(async () => {
      await prepare();
      await markdownRep.build();
    }),
    eager: before === undefined,
    fields,
  };
}

/**
 * A portal page: HTML by default, its Markdown when preferred. HTML pages announce their Markdown
 * alternate and the OpenAPI description in `Link` too, the same links as their `<link>` elements
 * (RFC 8288), for clients that read headers only (HEAD).
 */
function pageRoute(
  page: Page,
  content: Content,
  options: { file: PageFile; signal: HeaderField },
): Route {
  return negotiatedRoute(
    lazyRepresentation(TYPES.html, () => page.html, () => [
      NEGOTIATED,
      ...HTML_FIELDS,
      options.signal,
      ["link", linkHeader(pageLinks(page.meta, content.site))],
    ]),
    markdownRepresentation(TYPES.markdown, () => page.markdown, () => [NEGOTIATED, options.signal]),
    "text/html",
    [],
    () => content.prepareMarkdown(options.file),
  );
}
