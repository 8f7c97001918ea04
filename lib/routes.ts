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

/** One public path. */
export interface Route {
  /** The representation for an `Accept` value (memoised); only once `prepare()` has resolved. */
  pick: (accept: string | null) => Representation;
  /** Every representation of the path (for warming up); only once `prepare()` has resolved. */
  representations: () => Representation[];
  /**
   * Builds the path's representations, once (their ETags are digests from Web Crypto, asynchronous;
   * pages wait for `marked` first). The first request of a path waits for it.
   */
  prepare: () => Promise<void>;
  /** Whether `handler.ready` builds it: its `prepare()` imports nothing (pages need `marked`). */
  eager: boolean;
  /** Fields on every response of this path, errors included (Link, Deprecation, Sunset). */
  fields: readonly HeaderField[];
}

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
  const platform = negotiatedRoute(
    lazyRepresentation(TYPES.json, () => content.platformJson, () => [NEGOTIATED, ...discovery]),
    lazyRepresentation(
      TYPES.markdown,
      () => content.platformMarkdown,
      () => [NEGOTIATED, ...discovery],
    ),
    "application/json",
    discovery,
  );
  const developers = pageRoute(content.developers, content, "developers.md");
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
    ["/", pageRoute(content.home, content, "index.md")],
    ["/developers", developers],
    ["/api", developers],
    [
      "/developers/deprecation-policy",
      pageRoute(content.deprecationPolicy, content, "deprecation-policy.md"),
    ],
    [
      "/developers/deprecation-policy.md",
      textRoute(TYPES.markdown, () => content.deprecationPolicy.markdown),
    ],
    ["/openapi.json", openapi],
    ["/openapi", openapi],
    ["/llms.txt", textRoute(TYPES.text, () => content.llms)],
    // Crawlers may index the portal (RFC 9309); counted like every path.
    ["/robots.txt", textRoute(TYPES.text, () => content.robots)],
    [API_CATALOG_PATH, fixedRoute(catalog, [catalogLink])],
    [STYLESHEET_PATH, fixedRoute(assetRepresentation(TYPES.css, content.stylesheet))],
    [ICON_PATH, fixedRoute(assetRepresentation(TYPES.svg, content.icon))],
  ]);
}

/** A representation built once by `build()` and read by `get()` after that has resolved. */
interface Deferred {
  /** The built representation; throws before `build()` has resolved. */
  get: () => Representation;
  /** Builds the representation, once. */
  build: () => Promise<Representation>;
}

/** The {@linkcode Deferred} of what `make` builds. */
function deferred(make: () => Promise<Representation>): Deferred {
  let built: Representation | undefined;
  return {
    get: () => {
      if (built === undefined) throw new Error("a representation was read before it was built");
      return built;
    },
    build: once(async () => built = await make()),
  };
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
  return {
    pick: representation.get,
    representations: () => [representation.get()],
    prepare: once(async () => {
      await representation.build();
    }),
    eager: true,
    fields,
  };
}

/** A path of one text file, not negotiated. */
function textRoute(type: string, body: () => string): Route {
  return fixedRoute(lazyRepresentation(type, body, () => [NOT_NEGOTIATED]));
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
  return {
    pick: choose,
    representations: () => [defaultRep.get(), markdownRep.get()],
    prepare: once(async () => {
      await before?.();
      await Promise.all([defaultRep.build(), markdownRep.build()]);
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
function pageRoute(page: Page, content: Content, file: PageFile): Route {
  return negotiatedRoute(
    lazyRepresentation(TYPES.html, () => page.html, () => [
      NEGOTIATED,
      ...HTML_FIELDS,
      ["link", linkHeader(pageLinks(page.meta, content.site))],
    ]),
    lazyRepresentation(TYPES.markdown, () => page.markdown, () => [NEGOTIATED]),
    "text/html",
    [],
    () => content.prepareMarkdown(file),
  );
}
