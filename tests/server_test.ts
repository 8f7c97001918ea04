/**
 * HTTP behaviour of the whole service, against a real server on an ephemeral loopback port: every path,
 * method, representation and header field the issue and the design require.
 *
 * Every response goes through `call`, which holds it against the OpenAPI document the server serves
 * (`_contract.ts`: JSON bodies against their schemas, required headers present) and against the
 * invariants of every response (CORS, nosniff, the five RateLimit fields). Requests are sent with the raw
 * HTTP/1.1 client of `_server.ts`, so that exactly the header fields a test names are sent and bodies
 * arrive still encoded.
 *
 * @module
 */

import assert from "node:assert/strict";
import { brotliDecompressSync, gunzipSync } from "node:zlib";
// @ts-types="npm:@types/http-link-header@1.0.7"
import LinkHeader from "npm:http-link-header@1.1.4";
import { type Contract, loadContract } from "./_contract.ts";
import { buildAnswers } from "../lib/respond/paths.ts";
import { enableCompression } from "../lib/http/representation.ts";
import {
  type EnvRecord,
  EXPOSED_FIELDS,
  RATE_LIMIT_FIELDS,
  rawRequest,
  type RawResponse,
  startServer,
  TEST_BASE_URL,
  testConfig,
  testContent,
  type TestServer,
} from "./_server.ts";

// Compressed variants are built once compression is enabled: the service's warm-up enables it 0.5 s
// after start-up; these tests assert codings, so they enable it first (cold_start_imports_test.ts
// tests the identity answers before it).
enableCompression();

// ---------------------------------------------------------------------------------------------------
// Fixtures

const JSON_TYPE = "application/json";
const HTML_TYPE = "text/html; charset=utf-8";
const MARKDOWN_TYPE = "text/markdown; charset=utf-8";
const TEXT_TYPE = "text/plain; charset=utf-8";
const LINKSET_TYPE = 'application/linkset+json; profile="https://www.rfc-editor.org/info/rfc9727"';
const CSS_TYPE = "text/css; charset=utf-8";
const SVG_TYPE = "image/svg+xml";
/** Bodies at least this long must be sent compressed when asked; shorter ones may not shrink. */
const COMPRESSIBLE_BYTES = 1024;
const ALLOW = "GET, HEAD, OPTIONS";
const NEGOTIATED_VARY = "Accept, Accept-Encoding";
const ENCODING_VARY = "Accept-Encoding";
const BROWSER_ACCEPT =
  "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";
/** Fields whose values legitimately differ between two requests for the same thing. */
const PER_REQUEST_FIELDS = new Set(["date", "connection", ...RATE_LIMIT_FIELDS]);

/** One public path: its default representation and whether `Accept` can change it. */
interface PathCase {
  path: string;
  type: string;
  negotiated: boolean;
  discovery: boolean;
  /** `Cache-Control` of its 200s (documents revalidate; page assets may be reused for a while). */
  cache?: string;
}

/** The RFC 9727 API catalog: every response of it links to itself (`api-catalog`). */
const CATALOG = "/.well-known/api-catalog";

const PATHS: readonly PathCase[] = [
  { path: "/api/v1/platform", type: JSON_TYPE, negotiated: true, discovery: true },
  { path: "/developers", type: HTML_TYPE, negotiated: true, discovery: false },
  { path: "/api", type: HTML_TYPE, negotiated: true, discovery: false },
  { path: "/developers/deprecation-policy", type: HTML_TYPE, negotiated: true, discovery: false },
  {
    path: "/developers/deprecation-policy.md",
    type: MARKDOWN_TYPE,
    negotiated: false,
    discovery: false,
  },
  { path: "/", type: HTML_TYPE, negotiated: true, discovery: false },
  { path: "/index.html.md", type: MARKDOWN_TYPE, negotiated: false, discovery: false },
  { path: "/developers.md", type: MARKDOWN_TYPE, negotiated: false, discovery: false },
  { path: "/api.md", type: MARKDOWN_TYPE, negotiated: false, discovery: false },
  {
    path: "/sitemap.xml",
    type: "application/xml; charset=utf-8",
    negotiated: false,
    discovery: false,
  },
  { path: "/openapi.json", type: JSON_TYPE, negotiated: false, discovery: false },
  { path: "/openapi", type: JSON_TYPE, negotiated: false, discovery: false },
  { path: "/llms.txt", type: TEXT_TYPE, negotiated: false, discovery: false },
  { path: "/robots.txt", type: TEXT_TYPE, negotiated: false, discovery: false },
  { path: "/.well-known/api-catalog", type: LINKSET_TYPE, negotiated: false, discovery: false },
  {
    path: "/style.css",
    type: CSS_TYPE,
    negotiated: false,
    discovery: false,
    cache: "private, max-age=3600",
  },
  {
    path: "/favicon.svg",
    type: SVG_TYPE,
    negotiated: false,
    discovery: false,
    cache: "private, max-age=3600",
  },
];
const NEGOTIATED = PATHS.filter((p) => p.negotiated);
/** Paths whose bodies may be too short for compression to pay. */
const PATHS_SMALL = new Set(["/favicon.svg"]);

const UNKNOWN_PATHS = [
  "/api/v1/platform/",
  "/developers/",
  "/api/",
  "/openapi.json/",
  "/API/v1/platform",
  "/Api/V1/Platform",
  "/Developers",
  "/OPENAPI.JSON",
  "/LLMS.TXT",
  "/api/v2/platform",
  "/api/v1",
  "/api/v1/platform/extra",
  "/openapi.yaml",
  "/index.html",
  "/developers/deprecation-policy.MD",
  "/.well-known/api-catalog/",
  "/favicon.ico",
];

const DEPRECATION_ENV: EnvRecord = {
  DEPRECATION_DATE: "2026-01-01",
  SUNSET_DATE: "2026-07-01T12:30:00Z",
};
/** `@` and the Unix seconds of 2026-01-01T00:00:00Z (RFC 9745). */
const DEPRECATION_VALUE = "@1767225600";
/** The IMF-fixdate of 2026-07-01T12:30:00Z (RFC 8594, RFC 9110 section 5.6.7). */
const SUNSET_VALUE = "Wed, 01 Jul 2026 12:30:00 GMT";

function linkValue(base: string): string {
  return `<${base}/developers/deprecation-policy>; rel="deprecation"; type="text/html"`;
}

// ---------------------------------------------------------------------------------------------------
// The checked client

/** A response read to the end, decoded, and already held against the contract. */
interface Reply extends RawResponse {
  /** The decoded body as text. */
  text: string;
  /** The parsed body, when the media type is JSON. */
  json?: unknown;
}

interface CallOptions {
  method?: string;
  headers?: Record<string, string>;
}

/** A running server with its contract; every request goes through `call`. */
interface Api extends AsyncDisposable {
  server: TestServer;
  contract: Contract;
  /** Sends a request and checks the response against the document and the invariants. */
  call: (target: string, options?: CallOptions) => Promise<Reply>;
  /** Moves the server's clock. */
  advance: (seconds: number) => void;
}

/**
 * Starts a server and loads the contract from it. Loading the contract is itself a counted request,
 * so the clock is then moved one window on: every test starts with its full quota.
 */
async function open(env: EnvRecord = {}): Promise<Api> {
  const server = await startServer({ env });
  let contract: Contract;
  try {
    contract = await loadContract(server.url);
  } catch (error) {
    await server.close();
    throw error;
  }
  const windowMs = server.config.rateLimitWindowSeconds * 1000;
  server.clock.advance(windowMs);
  const call = async (target: string, options: CallOptions = {}): Promise<Reply> => {
    const method = options.method ?? "GET";
    const response = await rawRequest(server.url, target, {
      method,
      ...(options.headers ? { headers: options.headers } : {}),
    });
    const path = target.split("?")[0]!;
    let checked;
    try {
      checked = contract.check(path, method, response);
    } catch (error) {
      throw new Error(`contract: ${(error as Error).message}`, { cause: error });
    }
    assertEveryResponseInvariants(response, server, `${method} ${target}`);
    return {
      ...response,
      text: checked.text,
      ...("json" in checked ? { json: checked.json } : {}),
    };
  };
  return {
    server,
    contract,
    call,
    advance: (seconds) => server.clock.advance(Math.round(seconds * 1000)),
    [Symbol.asyncDispose]: () => server.close(),
  };
}

/** What every response of the service carries, whatever its path, method and status. */
function assertEveryResponseInvariants(response: RawResponse, server: TestServer, what: string) {
  const h = response.headers;
  assert.equal(h.get("x-content-type-options"), "nosniff", `${what}: nosniff`);
  assert.equal(h.get("access-control-allow-origin"), "*", `${what}: CORS origin`);
  const exposed = (h.get("access-control-expose-headers") ?? "").split(",").map((s) => s.trim());
  for (const name of EXPOSED_FIELDS) assert.ok(exposed.includes(name), `${what}: exposes ${name}`);
  for (const name of RATE_LIMIT_FIELDS) assert.ok(h.has(name), `${what}: ${name} present`);
  const { rateLimit, rateLimitWindowSeconds } = server.config;
  assert.equal(h.get("ratelimit-policy"), `"default";q=${rateLimit};w=${rateLimitWindowSeconds}`);
  assert.equal(h.get("ratelimit-limit"), String(rateLimit), `${what}: RateLimit-Limit`);
  const remaining = h.get("ratelimit-remaining")!;
  const reset = h.get("ratelimit-reset")!;
  assert.match(remaining, /^\d+$/);
  assert.match(reset, /^\d+$/);
  assert.ok(Number(remaining) <= rateLimit, `${what}: remaining within the limit`);
  assert.ok(Number(reset) <= rateLimitWindowSeconds, `${what}: reset within the window`);
  assert.equal(h.get("ratelimit"), `"default";r=${remaining};t=${reset}`, `${what}: RateLimit`);
  if (response.status === 429) {
    assert.equal(h.get("retry-after"), reset, `${what}: Retry-After equals RateLimit-Reset`);
  } else if (response.status !== 204) {
    assert.equal(h.get("retry-after"), null, `${what}: Retry-After only on 429`);
  }
  const type = h.get("content-type");
  if (type !== null && type.startsWith("text/")) {
    assert.match(type, /;\s*charset=utf-8$/, `${what}: text types carry charset=utf-8`);
  }
}

function rate(reply: RawResponse): { remaining: number; reset: number } {
  return {
    remaining: Number(reply.headers.get("ratelimit-remaining")),
    reset: Number(reply.headers.get("ratelimit-reset")),
  };
}

function perRepresentationFields(reply: RawResponse): Record<string, string> {
  return Object.fromEntries([...reply.headers].filter(([name]) => !PER_REQUEST_FIELDS.has(name)));
}

const PREFLIGHT = {
  origin: "https://app.example.org",
  "access-control-request-method": "GET",
  "access-control-request-headers": "accept",
};

// ---------------------------------------------------------------------------------------------------
// Paths and representations

Deno.test("these tests cover every path of the route table", () => {
  const config = testConfig();
  const routes = [...buildAnswers(config, testContent(config)).paths.keys()].sort();
  assert.deepEqual(PATHS.map((p) => p.path).sort(), routes);
});

Deno.test("every public path answers GET 200 with its default representation", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  for (const { path, type, negotiated, cache } of PATHS) {
    const reply = await api.call(path);
    assert.equal(reply.status, 200, path);
    assert.equal(reply.headers.get("content-type"), type, path);
    assert.equal(reply.headers.get("content-encoding"), null, `${path}: identity when not asked`);
    assert.equal(reply.headers.get("cache-control"), cache ?? "no-cache", path);
    assert.equal(reply.headers.get("vary"), negotiated ? NEGOTIATED_VARY : ENCODING_VARY, path);
    assert.match(reply.headers.get("etag") ?? "", /^"[^"]+"$/, `${path}: strong ETag`);
    assert.ok(reply.body.length > 0, path);
  }
});

Deno.test("GET /api/v1/platform returns the Platform with absolute links from PUBLIC_BASE_URL", async () => {
  await using api = await open();
  const reply = await api.call("/api/v1/platform");
  assert.deepEqual(reply.json, {
    name: api.server.config.name,
    description: api.server.config.description,
    documentation: `${TEST_BASE_URL}/`,
    developerResources: `${TEST_BASE_URL}/developers`,
    openapi: `${TEST_BASE_URL}/openapi.json`,
    agentInstructions: `${TEST_BASE_URL}/llms.txt`,
    support: "mailto:support@example.com",
  });
});

Deno.test("each path's default body is the document it names", async () => {
  await using api = await open();
  const html = ["/", "/developers", "/api", "/developers/deprecation-policy"];
  for (const path of html) {
    const { text } = await api.call(path);
    assert.match(text, /^<!doctype html>/i, path);
    assert.match(text, /<title>[^<]+<\/title>/, path);
  }
  const policy = await api.call("/developers/deprecation-policy.md");
  assert.match(policy.text, /^# Deprecation policy/);
  const openapi = await api.call("/openapi.json");
  assert.equal((openapi.json as { openapi: string }).openapi.slice(0, 4), "3.1.");
  const llms = await api.call("/llms.txt");
  assert.ok(llms.text.startsWith(`# ${api.server.config.name}\n`), "llms.txt opens with an H1");
  const catalog = await api.call("/.well-known/api-catalog");
  const linkset = (catalog.json as { linkset: Array<{ anchor: string }> }).linkset;
  assert.deepEqual(linkset.map((context) => context.anchor), [
    `${TEST_BASE_URL}/.well-known/api-catalog`,
    `${TEST_BASE_URL}/api/v1/platform`,
  ]);
});

Deno.test("RFC 9727: HEAD and GET of the API catalog, and every page, link to it with rel=api-catalog", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  const catalogUrl = `${TEST_BASE_URL}${CATALOG}`;
  const catalogLinks = (reply: { headers: Headers }, what: string) => {
    const value = reply.headers.get("link");
    assert.ok(value, `${what}: Link`);
    return LinkHeader.parse(value).rel("api-catalog").map((link) => link.uri);
  };
  for (const method of ["HEAD", "GET"]) {
    const reply = await api.call(CATALOG, { method });
    assert.equal(reply.status, 200);
    assert.deepEqual(catalogLinks(reply, `${method} ${CATALOG}`), [catalogUrl], method);
  }
  const etag = (await api.call(CATALOG)).headers.get("etag")!;
  const revalidated = await api.call(CATALOG, { headers: { "if-none-match": etag } });
  assert.equal(revalidated.status, 304);
  assert.deepEqual(catalogLinks(revalidated, "304"), [catalogUrl]);
  for (const path of ["/", "/developers", "/api", "/developers/deprecation-policy"]) {
    const reply = await api.call(path, { method: "HEAD" });
    assert.deepEqual(catalogLinks(reply, path), [catalogUrl], path);
  }
  const page = await api.call("/developers");
  assert.ok(
    page.text.includes(
      `<link rel="api-catalog" type="application/linkset+json" href="${catalogUrl}">`,
    ),
  );
  const catalog = await api.call(CATALOG);
  assert.equal(
    catalog.headers.get("content-type"),
    'application/linkset+json; profile="https://www.rfc-editor.org/info/rfc9727"',
  );
});

Deno.test("/robots.txt lets crawlers index the portal, with its content signal and sitemap, as text/plain, counted like every path", async () => {
  await using api = await open({ RATE_LIMIT: "5" });
  const reply = await api.call("/robots.txt");
  assert.equal(reply.status, 200);
  assert.equal(reply.headers.get("content-type"), TEXT_TYPE);
  assert.equal(reply.headers.get("ratelimit-remaining"), "4", "counted");
  // The groups of RFC 9309 section 2.1: every crawler, nothing disallowed; the content signal
  // (contentsignals.org) in the group, and the sitemap (issue 33).
  const rules = reply.text.split("\n").map((line) => line.replace(/#.*/, "").trim())
    .filter((line) => line !== "");
  assert.deepEqual(rules, [
    "User-agent: *",
    "Content-Signal: search=yes, ai-input=yes, ai-train=no",
    "Allow: /",
    `Sitemap: ${api.server.config.baseUrl}/sitemap.xml`,
  ]);
  const documented = api.contract.document.paths["/robots.txt"];
  assert.ok(documented, "the OpenAPI document lists /robots.txt");
});

Deno.test("aliases serve the same bytes: /api as /developers, /openapi as /openapi.json", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  for (const [alias, path] of [["/api", "/developers"], ["/openapi", "/openapi.json"]]) {
    for (const accept of ["*/*", "text/markdown"]) {
      const a = await api.call(alias!, { headers: { accept } });
      const b = await api.call(path!, { headers: { accept } });
      assert.deepEqual(a.body, b.body, `${alias} ${accept}`);
      assert.equal(a.headers.get("etag"), b.headers.get("etag"));
    }
  }
});

Deno.test("/developers/deprecation-policy.md is the Markdown of /developers/deprecation-policy", async () => {
  await using api = await open();
  const fixed = await api.call("/developers/deprecation-policy.md", {
    headers: { accept: "text/html" },
  });
  const negotiated = await api.call("/developers/deprecation-policy", {
    headers: { accept: "text/markdown" },
  });
  assert.equal(fixed.headers.get("content-type"), MARKDOWN_TYPE, "Accept does not change it");
  assert.equal(fixed.text, negotiated.text);
});

Deno.test("negotiated paths follow Accept with q-values and fall back to the default", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  for (const { path, type: defaultType } of NEGOTIATED) {
    const other = defaultType === JSON_TYPE ? "application/json" : "text/html";
    const cases: Array<[string | undefined, string]> = [
      [undefined, defaultType],
      ["*/*", defaultType],
      ["text/markdown", MARKDOWN_TYPE],
      ["text/*", defaultType === JSON_TYPE ? MARKDOWN_TYPE : defaultType],
      [`${other};q=0.5, text/markdown;q=0.9`, MARKDOWN_TYPE],
      [`text/markdown;q=0.5, ${other};q=0.9`, defaultType],
      [`text/markdown;q=0.8, */*;q=0.9`, defaultType],
      [`${other};q=0, text/markdown;q=0.1`, MARKDOWN_TYPE],
      [`text/markdown;q=0, */*`, defaultType],
      ["image/png", defaultType],
      ["application/xml, image/*;q=0.5", defaultType],
      ["text/markdown;q=0", defaultType],
      ["not a media type", defaultType],
    ];
    if (defaultType === HTML_TYPE) cases.push([BROWSER_ACCEPT, HTML_TYPE]);
    for (const [accept, expected] of cases) {
      const reply = await api.call(path, accept === undefined ? {} : { headers: { accept } });
      assert.equal(reply.status, 200, `${path} Accept: ${accept}`);
      assert.equal(reply.headers.get("content-type"), expected, `${path} Accept: ${accept}`);
      if (expected === MARKDOWN_TYPE) {
        assert.match(reply.text, /^# /, `${path} Markdown body`);
      }
    }
  }
});

Deno.test("paths with one representation ignore Accept", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  for (const { path, type } of PATHS.filter((p) => !p.negotiated)) {
    for (const accept of ["text/markdown", "text/html", "image/png", "application/json;q=0"]) {
      const reply = await api.call(path, { headers: { accept } });
      assert.equal(reply.status, 200, `${path} ${accept}`);
      assert.equal(reply.headers.get("content-type"), type, `${path} ${accept}`);
      assert.equal(reply.headers.get("vary"), ENCODING_VARY);
    }
  }
});

Deno.test("the Markdown of /api/v1/platform lists the same absolute links as the JSON", async () => {
  await using api = await open();
  const json = (await api.call("/api/v1/platform")).json as Record<string, string>;
  const { text } = await api.call("/api/v1/platform", { headers: { accept: "text/markdown" } });
  for (const field of ["documentation", "developerResources", "openapi", "agentInstructions"]) {
    assert.ok(text.includes(json[field]!), `Markdown links ${field} ${json[field]}`);
  }
});

// ---------------------------------------------------------------------------------------------------
// Compression

Deno.test("gzip and br bodies decode to the identity body on every path and representation", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  for (const { path, negotiated } of PATHS) {
    for (const accept of negotiated ? ["*/*", "text/markdown"] : ["*/*"]) {
      const identity = await api.call(path, {
        headers: { accept, "accept-encoding": "identity" },
      });
      assert.equal(identity.headers.get("content-encoding"), null);
      const decoders = { gzip: gunzipSync, br: brotliDecompressSync };
      for (const [coding, decode] of Object.entries(decoders)) {
        const what = `${path} ${accept} ${coding}`;
        const reply = await api.call(path, { headers: { accept, "accept-encoding": coding } });
        assert.equal(reply.headers.get("content-type"), identity.headers.get("content-type"));
        assert.equal(reply.headers.get("content-length"), String(reply.body.length), what);
        if (reply.headers.get("content-encoding") === null) {
          // Allowed only where the coding would not make the body smaller: then it is the identity.
          assert.ok(
            identity.body.length < COMPRESSIBLE_BYTES,
            `${what}: a long body is compressed`,
          );
          assert.deepEqual(reply.body, identity.body, what);
          assert.equal(reply.headers.get("etag"), identity.headers.get("etag"), what);
          continue;
        }
        assert.equal(reply.headers.get("content-encoding"), coding, what);
        assert.deepEqual(new Uint8Array(decode(reply.body)), identity.body, what);
        assert.ok(reply.body.length < identity.body.length, `${what} is smaller`);
      }
    }
  }
});

Deno.test("Accept-Encoding is negotiated with q-values, br winning ties", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  const cases: Array<[string, string | null]> = [
    ["gzip, deflate, br", "br"],
    ["br, gzip", "br"],
    ["gzip, br", "br"],
    ["gzip;q=1, br;q=0.5", "gzip"],
    ["br;q=0, gzip", "gzip"],
    ["gzip;q=0.2, identity;q=0.9", null],
    ["*", "br"],
    ["*;q=0.5, gzip", "gzip"],
    ["deflate", null],
    ["identity", null],
    ["br;q=0, gzip;q=0", null],
    ["BR", "br"],
    ["", null],
  ];
  for (const [acceptEncoding, expected] of cases) {
    const reply = await api.call("/api/v1/platform", {
      headers: { "accept-encoding": acceptEncoding },
    });
    assert.equal(
      reply.headers.get("content-encoding"),
      expected,
      `Accept-Encoding: ${acceptEncoding}`,
    );
  }
});

// ---------------------------------------------------------------------------------------------------
// Validators and conditional requests

Deno.test("each representation and coding has its own stable ETag", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  for (const { path, negotiated } of PATHS) {
    // ETag -> bytes and bytes -> ETag must both be functions: one ETag per distinct body.
    const bodyOf = new Map<string, string>();
    const etagOf = new Map<string, string>();
    for (const accept of negotiated ? ["*/*", "text/markdown"] : ["*/*"]) {
      for (const encoding of ["identity", "gzip", "br"]) {
        const headers = { accept, "accept-encoding": encoding };
        const first = await api.call(path, { headers });
        const second = await api.call(path, { headers });
        const etag = first.headers.get("etag")!;
        assert.equal(second.headers.get("etag"), etag, `${path}: stable`);
        const bytes = [...first.body].join(",");
        assert.equal(bodyOf.get(etag) ?? bytes, bytes, `${path} ${accept} ${encoding}: one body`);
        assert.equal(etagOf.get(bytes) ?? etag, etag, `${path} ${accept} ${encoding}: one ETag`);
        bodyOf.set(etag, bytes);
        etagOf.set(bytes, etag);
      }
    }
    const expected = (negotiated ? 2 : 1) * (PATHS_SMALL.has(path) ? 1 : 3);
    assert.ok(bodyOf.size >= expected, `${path}: ${bodyOf.size} variants`);
  }
});

Deno.test("If-None-Match answers 304 with no body for a matching ETag, W/, lists and *", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  for (const { path, negotiated } of PATHS) {
    for (const accept of negotiated ? ["*/*", "text/markdown"] : ["*/*"]) {
      for (const encoding of ["identity", "br"]) {
        const headers = { accept, "accept-encoding": encoding };
        const ok = await api.call(path, { headers });
        const etag = ok.headers.get("etag")!;
        const matching = [etag, `W/${etag}`, `"nope", ${etag}`, `"a",${etag} , "b"`, "*"];
        for (const ifNoneMatch of matching) {
          for (const method of ["GET", "HEAD"]) {
            const reply = await api.call(path, {
              method,
              headers: { ...headers, "if-none-match": ifNoneMatch },
            });
            const what = `${method} ${path} ${accept} ${encoding} If-None-Match: ${ifNoneMatch}`;
            assert.equal(reply.status, 304, what);
            assert.equal(reply.body.length, 0, what);
            assert.equal(reply.headers.get("etag"), etag, what);
            assert.equal(reply.headers.get("vary"), ok.headers.get("vary"), what);
            assert.equal(reply.headers.get("cache-control"), ok.headers.get("cache-control"), what);
            assert.equal(reply.headers.get("link"), ok.headers.get("link"), what);
          }
        }
        for (const ifNoneMatch of ['"nope"', `${etag.slice(0, -2)}"`, 'W/"nope", "other"']) {
          const reply = await api.call(path, {
            headers: { ...headers, "if-none-match": ifNoneMatch },
          });
          assert.equal(reply.status, 200, `${path} If-None-Match: ${ifNoneMatch}`);
          assert.deepEqual(reply.body, ok.body);
        }
      }
    }
  }
});

Deno.test("an ETag of one variant does not validate another", async () => {
  await using api = await open();
  const br = await api.call("/api/v1/platform", { headers: { "accept-encoding": "br" } });
  const md = await api.call("/api/v1/platform", { headers: { accept: "text/markdown" } });
  const asIdentity = await api.call("/api/v1/platform", {
    headers: { "accept-encoding": "identity", "if-none-match": br.headers.get("etag")! },
  });
  assert.equal(asIdentity.status, 200, "the br ETag does not match the identity variant");
  const asJson = await api.call("/api/v1/platform", {
    headers: { accept: "application/json", "if-none-match": md.headers.get("etag")! },
  });
  assert.equal(asJson.status, 200, "the Markdown ETag does not match the JSON variant");
});

// ---------------------------------------------------------------------------------------------------
// HEAD and OPTIONS

Deno.test("HEAD has no body and the same header fields as GET, Content-Length included", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  for (const { path, negotiated } of PATHS) {
    for (const accept of negotiated ? ["*/*", "text/markdown"] : ["*/*"]) {
      for (const encoding of ["identity", "br"]) {
        const headers = { accept, "accept-encoding": encoding };
        const get = await api.call(path, { headers });
        const head = await api.call(path, { method: "HEAD", headers });
        const what = `HEAD ${path} ${accept} ${encoding}`;
        assert.equal(head.status, 200, what);
        assert.equal(head.body.length, 0, what);
        assert.equal(head.headers.get("content-length"), String(get.body.length), what);
        assert.deepEqual(perRepresentationFields(head), perRepresentationFields(get), what);
      }
    }
  }
  for (const accept of ["*/*", "text/markdown", "text/html"]) {
    const get = await api.call("/nope", { headers: { accept } });
    const head = await api.call("/nope", { method: "HEAD", headers: { accept } });
    assert.equal(head.status, 404);
    assert.equal(head.body.length, 0);
    assert.equal(head.headers.get("content-length"), String(get.body.length), `404 ${accept}`);
    assert.deepEqual(perRepresentationFields(head), perRepresentationFields(get));
  }
});

Deno.test("OPTIONS answers 204 with Allow and CORS fields on every path, plain and preflight", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  for (const { path, discovery } of PATHS) {
    for (const headers of [{}, PREFLIGHT]) {
      const reply = await api.call(path, { method: "OPTIONS", headers });
      const what = `OPTIONS ${path} ${"origin" in headers ? "preflight" : "plain"}`;
      assert.equal(reply.status, 204, what);
      assert.equal(reply.body.length, 0, what);
      assert.equal(reply.headers.get("allow"), ALLOW, what);
      assert.equal(reply.headers.get("access-control-allow-methods"), ALLOW, what);
      assert.equal(
        reply.headers.get("access-control-allow-headers"),
        "Accept, Accept-Encoding, If-None-Match",
        what,
      );
      assert.equal(reply.headers.get("access-control-max-age"), "86400", what);
      assert.equal(reply.headers.has("link"), discovery || path === CATALOG, `${what}: Link`);
    }
  }
});

// ---------------------------------------------------------------------------------------------------
// Errors

Deno.test("POST, PUT, DELETE and PATCH on every public path answer 405 with Allow and a JSON Error", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  for (const { path, discovery } of PATHS) {
    for (const method of ["POST", "PUT", "DELETE", "PATCH"]) {
      for (const accept of ["*/*", "text/markdown", "text/html"]) {
        const reply = await api.call(path, { method, headers: { accept } });
        const what = `${method} ${path} Accept: ${accept}`;
        assert.equal(reply.status, 405, what);
        assert.equal(reply.headers.get("allow"), ALLOW, what);
        assert.equal(
          reply.headers.get("content-type"),
          JSON_TYPE,
          `${what}: JSON (spec section 7)`,
        );
        assert.equal(reply.headers.get("cache-control"), "no-store", what);
        assert.equal(
          (reply.json as { error: { code: string } }).error.code,
          "method_not_allowed",
          what,
        );
        assert.equal(reply.headers.has("link"), discovery || path === CATALOG, `${what}: Link`);
      }
    }
  }
});

Deno.test("unknown paths, trailing slashes and wrong case answer 404 whatever the method", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  for (const path of UNKNOWN_PATHS) {
    for (const method of ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]) {
      const reply = await api.call(path, { method });
      const what = `${method} ${path}`;
      assert.equal(reply.status, 404, what);
      assert.equal(reply.headers.get("content-type"), JSON_TYPE, what);
      assert.equal((reply.json as { error: { code: string } }).error.code, "not_found", what);
      assert.equal(reply.headers.get("cache-control"), "no-store", what);
      assert.equal(reply.headers.get("allow"), null, `${what}: no Allow on an unknown path`);
    }
  }
});

Deno.test("a query string does not change the path", async () => {
  await using api = await open();
  const plain = await api.call("/api/v1/platform");
  const query = await api.call("/api/v1/platform?client=secret&x=%2F");
  assert.equal(query.status, 200);
  assert.deepEqual(query.body, plain.body);
  const missing = await api.call("/nope?x=1");
  assert.equal(missing.status, 404);
});

Deno.test("404 bodies are JSON by default, Markdown or HTML when Accept prefers them", async () => {
  await using api = await open();
  const cases: Array<[string | undefined, string]> = [
    [undefined, JSON_TYPE],
    ["*/*", JSON_TYPE],
    ["application/json", JSON_TYPE],
    ["image/png", JSON_TYPE],
    ["text/markdown", MARKDOWN_TYPE],
    ["text/markdown;q=0.9, application/json;q=0.1", MARKDOWN_TYPE],
    ["application/json;q=0.9, text/markdown;q=0.1", JSON_TYPE],
    ["text/html", HTML_TYPE],
    [BROWSER_ACCEPT, HTML_TYPE],
  ];
  for (const [accept, expected] of cases) {
    const reply = await api.call("/api/v1/nothing", accept ? { headers: { accept } } : {});
    const what = `Accept: ${accept}`;
    assert.equal(reply.status, 404, what);
    assert.equal(reply.headers.get("content-type"), expected, what);
    assert.equal(reply.headers.get("vary"), "Accept", what);
    if (expected === JSON_TYPE) {
      const { error } = reply.json as { error: { code: string; message: string; hint: string } };
      assert.equal(error.code, "not_found");
      assert.ok(error.hint.includes(`${TEST_BASE_URL}/api/v1/platform`), "hint from the base URL");
    } else if (expected === MARKDOWN_TYPE) {
      assert.match(reply.text, /^# 404 /);
      assert.ok(reply.text.includes("`not_found`"), what);
    } else {
      assert.match(reply.text, /^<!doctype html>/i);
      assert.ok(reply.text.includes("not_found"), what);
    }
    assert.ok(!reply.text.includes("/api/v1/nothing"), `${what}: the body never echoes the path`);
  }
});

// ---------------------------------------------------------------------------------------------------
// Header fields

Deno.test("HTML responses carry a strict CSP and Referrer-Policy; other types do not", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  const replies = [
    ...await Promise.all(
      NEGOTIATED.map(({ path }) => api.call(path, { headers: { accept: "*/*" } })),
    ),
    ...await Promise.all(
      NEGOTIATED.map(({ path }) => api.call(path, { headers: { accept: "text/html" } })),
    ),
    await api.call("/nope", { headers: { accept: "text/html" } }),
    await api.call("/api/v1/platform"),
    await api.call("/api/v1/platform", { headers: { accept: "text/markdown" } }),
    await api.call("/openapi.json"),
    await api.call("/nope"),
    await api.call("/nope", { headers: { accept: "text/markdown" } }),
  ];
  let html = 0;
  for (const reply of replies) {
    const csp = reply.headers.get("content-security-policy");
    if (reply.headers.get("content-type") === HTML_TYPE) {
      html++;
      assert.ok(csp !== null, "CSP on HTML");
      const directives = csp.split(";").map((d) => d.trim());
      for (const required of ["default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'"]) {
        assert.ok(directives.includes(required), `CSP has ${required}`);
      }
      assert.ok(!csp.includes("unsafe-inline") && !csp.includes("unsafe-eval"), csp);
      assert.equal(reply.headers.get("referrer-policy"), "no-referrer");
      // The strict policy holds only if the page needs no inline script or style.
      assert.ok(!/<script|\sstyle=|\son[a-z]+=/i.test(reply.text), "no inline script or style");
    } else {
      assert.equal(csp, null, `no CSP on ${reply.headers.get("content-type")}`);
      assert.equal(reply.headers.get("referrer-policy"), null);
    }
  }
  assert.equal(html, 2 * (NEGOTIATED.length - 1) + 1, "every HTML response was seen");
});

Deno.test("Link to the deprecation policy is on every /api/v1/platform response and nowhere else", async () => {
  await using api = await open({ RATE_LIMIT: "30" });
  const link = linkValue(TEST_BASE_URL);
  const platform = [
    await api.call("/api/v1/platform"),
    await api.call("/api/v1/platform", { headers: { accept: "text/markdown" } }),
    await api.call("/api/v1/platform", { method: "HEAD" }),
    await api.call("/api/v1/platform", { headers: { "if-none-match": "*" } }),
    await api.call("/api/v1/platform", { method: "DELETE" }),
    await api.call("/api/v1/platform", { method: "OPTIONS" }),
    await api.call("/api/v1/platform", { method: "OPTIONS", headers: PREFLIGHT }),
  ];
  // Six of those seven were counted (not the preflight): 24 more spend the quota of 30.
  for (let i = 0; i < 24; i++) assert.equal((await api.call("/api/v1/platform")).status, 200);
  const limited = await api.call("/api/v1/platform");
  assert.equal(limited.status, 429);
  platform.push(limited);
  for (const reply of platform) assert.equal(reply.headers.get("link"), link, `${reply.status}`);
  api.advance(60);
  const others = [
    ...PATHS.filter((p) => !p.discovery).map(({ path }) => ({ path, accept: "*/*" })),
    ...NEGOTIATED.filter((p) => !p.discovery).map(({ path }) => ({
      path,
      accept: "text/markdown",
    })),
    { path: "/nope", accept: "*/*" },
    { path: "/nope", accept: "text/html" },
  ];
  for (const { path, accept } of others) {
    const other = (await api.call(path, { headers: { accept } })).headers.get("link") ?? "";
    assert.ok(!other.includes('rel="deprecation"'), `${path} ${accept}: ${other}`);
  }
});

Deno.test("no Deprecation or Sunset unless a removal is configured", async () => {
  await using api = await open();
  for (const { path } of PATHS) {
    const reply = await api.call(path);
    assert.equal(reply.headers.get("deprecation"), null, path);
    assert.equal(reply.headers.get("sunset"), null, path);
  }
});

Deno.test("a configured removal adds Deprecation (@epoch) and Sunset (HTTP-date) to /api/v1/platform", async () => {
  await using api = await open({ ...DEPRECATION_ENV, RATE_LIMIT: "7" });
  const replies = [
    await api.call("/api/v1/platform"),
    await api.call("/api/v1/platform", {
      headers: { accept: "text/markdown", "accept-encoding": "br" },
    }),
    await api.call("/api/v1/platform", { method: "HEAD" }),
    await api.call("/api/v1/platform", { headers: { "if-none-match": "*" } }),
    await api.call("/api/v1/platform", { method: "PUT" }),
    await api.call("/api/v1/platform", { method: "OPTIONS", headers: PREFLIGHT }),
  ];
  await api.call("/api/v1/platform");
  await api.call("/api/v1/platform");
  replies.push(await api.call("/api/v1/platform"));
  assert.equal(replies.at(-1)!.status, 429);
  for (const reply of replies) {
    assert.equal(reply.headers.get("deprecation"), DEPRECATION_VALUE, `${reply.status}`);
    assert.equal(reply.headers.get("sunset"), SUNSET_VALUE, `${reply.status}`);
  }
  api.advance(60);
  for (const { path } of PATHS.filter((p) => !p.discovery)) {
    const reply = await api.call(path);
    assert.equal(reply.headers.get("deprecation"), null, path);
    assert.equal(reply.headers.get("sunset"), null, path);
  }
});

Deno.test("absolute links come from PUBLIC_BASE_URL, never from the Host header", async () => {
  const base = "https://public.example.org/discovery";
  await using api = await open({ PUBLIC_BASE_URL: `${base}/`, RATE_LIMIT: "1000" });
  const host = { host: "evil.example.com:8443" };
  const platform = await api.call("/api/v1/platform", { headers: host });
  for (const [field, value] of Object.entries(platform.json as Record<string, string>)) {
    if (["documentation", "developerResources", "openapi", "agentInstructions"].includes(field)) {
      assert.ok(value.startsWith(`${base}/`), `${field}: ${value}`);
    }
  }
  assert.equal(platform.headers.get("link"), linkValue(base));
  const openapi = await api.call("/openapi.json", { headers: host });
  assert.equal((openapi.json as { servers: Array<{ url: string }> }).servers[0]!.url, base);
  const catalog = await api.call("/.well-known/api-catalog", { headers: host });
  assert.ok(catalog.text.includes(`"${base}/api/v1/platform"`));
  const targets = [
    ...PATHS.map(({ path }) => ({ path, accept: "*/*" })),
    ...NEGOTIATED.map(({ path }) => ({ path, accept: "text/markdown" })),
    { path: "/nope", accept: "*/*" },
    { path: "/nope", accept: "text/markdown" },
    { path: "/nope", accept: "text/html" },
  ];
  for (const { path, accept } of targets) {
    const reply = await api.call(path, { headers: { ...host, accept } });
    const all = reply.text + [...reply.headers].map(([, v]) => v).join("\n");
    assert.ok(!all.includes("evil.example.com"), `${path} ${accept} never uses Host`);
    assert.ok(!all.includes(`127.0.0.1:${api.server.port}`), `${path} ${accept}: no own address`);
    if (!["/style.css", "/favicon.svg"].includes(path)) {
      assert.ok(all.includes(base), `${path} ${accept} links from the base`);
    }
  }
});

// ---------------------------------------------------------------------------------------------------
// Rate limiting

Deno.test("the default limit is 60 per 60 s: the 61st request is refused with a rate_limited Error", async () => {
  await using api = await open();
  const paths = PATHS.map((p) => p.path);
  for (let i = 0; i < 60; i++) {
    const reply = await api.call(paths[i % paths.length]!);
    assert.equal(reply.status, 200, `request ${i + 1}`);
    assert.equal(rate(reply).remaining, 59 - i);
  }
  const refused = await api.call("/api/v1/platform");
  assert.equal(refused.status, 429);
  assert.equal(refused.headers.get("content-type"), JSON_TYPE);
  assert.equal(refused.headers.get("cache-control"), "no-store");
  assert.equal(refused.headers.get("retry-after"), "60");
  assert.equal(refused.headers.get("ratelimit-reset"), "60");
  assert.equal(refused.headers.get("ratelimit-remaining"), "0");
  assert.equal((refused.json as { error: { code: string } }).error.code, "rate_limited");
});

Deno.test("the five RateLimit fields count down correctly through 200, 304, 404, 405, OPTIONS and 429", async () => {
  await using api = await open({ RATE_LIMIT: "5" });
  const ok = await api.call("/api/v1/platform");
  assert.deepEqual([ok.status, rate(ok)], [200, { remaining: 4, reset: 60 }]);
  api.advance(10);
  const etag = ok.headers.get("etag")!;
  const steps: Array<[string, CallOptions, number, number]> = [
    ["/api/v1/platform", { headers: { "if-none-match": etag } }, 304, 3],
    ["/no/such/path", {}, 404, 2],
    ["/developers", { method: "POST" }, 405, 1],
    ["/llms.txt", { method: "OPTIONS" }, 204, 0],
  ];
  for (const [path, options, status, remaining] of steps) {
    const reply = await api.call(path, options);
    assert.equal(reply.status, status, path);
    assert.deepEqual(rate(reply), { remaining, reset: 50 }, `${status}: oldest leaves in 50 s`);
  }
  for (const [path, options] of steps) {
    const refused = await api.call(path, options);
    assert.equal(refused.status, 429, `${path} is refused once the quota is spent`);
    assert.deepEqual(rate(refused), { remaining: 0, reset: 50 });
    assert.equal(refused.headers.get("retry-after"), "50");
  }
  api.advance(20.5);
  const later = await api.call("/openapi.json");
  assert.equal(later.status, 429);
  assert.equal(later.headers.get("retry-after"), "30", "29.5 s is rounded up");
  api.advance(29.4);
  assert.equal((await api.call("/")).headers.get("retry-after"), "1", "0.1 s is rounded up");
  api.advance(0.1);
  // The first request (t=0) has left the window; the four at t=10 s are still in it.
  const admitted = await api.call("/");
  assert.equal(admitted.status, 200);
  assert.deepEqual(rate(admitted), { remaining: 0, reset: 10 });
  const again = await api.call("/");
  assert.equal(again.status, 429);
  assert.equal(again.headers.get("retry-after"), "10");
});

Deno.test("a refused request is not counted: the caller is admitted as soon as the oldest leaves", async () => {
  await using api = await open({ RATE_LIMIT: "1" });
  assert.equal((await api.call("/api/v1/platform")).status, 200);
  let now = 0;
  for (const at of [1, 8, 15, 22, 29, 36, 43, 50, 57, 59.999]) {
    api.advance(at - now);
    now = at;
    const refused = await api.call("/api/v1/platform");
    assert.equal(refused.status, 429, `t=${at}`);
    assert.equal(refused.headers.get("retry-after"), String(Math.ceil(60 - at)), `t=${at}`);
  }
  api.advance(60 - now);
  const admitted = await api.call("/api/v1/platform");
  assert.equal(admitted.status, 200, "429s in the window did not count");
  assert.deepEqual(rate(admitted), { remaining: 0, reset: 60 });
});

Deno.test("a CORS preflight is not counted, a plain OPTIONS is", async () => {
  await using api = await open({ RATE_LIMIT: "3" });
  for (let i = 0; i < 5; i++) {
    const preflight = await api.call("/api/v1/platform", { method: "OPTIONS", headers: PREFLIGHT });
    assert.equal(preflight.status, 204);
    assert.deepEqual(
      rate(preflight),
      { remaining: 3, reset: 60 },
      "nothing counted yet: the whole window",
    );
  }
  const unknown = await api.call("/nope", { method: "OPTIONS", headers: PREFLIGHT });
  assert.equal(unknown.status, 204, "a preflight to an unknown path is granted too");
  assert.equal(rate(unknown).remaining, 3, "a preflight to an unknown path is not counted either");
  assert.equal(rate(await api.call("/api/v1/platform")).remaining, 2);
  const preflight = await api.call("/developers", { method: "OPTIONS", headers: PREFLIGHT });
  assert.deepEqual(rate(preflight), { remaining: 2, reset: 60 }, "reports without counting");
  const plain = await api.call("/developers", { method: "OPTIONS" });
  assert.equal(plain.status, 204);
  assert.equal(rate(plain).remaining, 1, "a plain OPTIONS counts");
  const withOriginOnly = await api.call("/developers", {
    method: "OPTIONS",
    headers: { origin: "https://app.example.org" },
  });
  assert.equal(rate(withOriginOnly).remaining, 0, "Origin alone does not make a preflight");
  api.advance(60);
  const withMethodOnly = await api.call("/developers", {
    method: "OPTIONS",
    headers: { "access-control-request-method": "GET" },
  });
  assert.equal(rate(withMethodOnly).remaining, 2, "nor does a request method without Origin");
});

Deno.test("HEAD of a 429 has no body, the same fields and the Content-Length of GET's", async () => {
  await using api = await open({ RATE_LIMIT: "1" });
  await api.call("/api/v1/platform");
  const get = await api.call("/api/v1/platform");
  const head = await api.call("/api/v1/platform", { method: "HEAD" });
  assert.equal(get.status, 429);
  assert.equal(head.status, 429);
  assert.equal(head.body.length, 0);
  assert.equal(head.headers.get("content-length"), String(get.body.length));
  assert.deepEqual(perRepresentationFields(head), perRepresentationFields(get));
  assert.equal(head.headers.get("retry-after"), get.headers.get("retry-after"));
});

// ---------------------------------------------------------------------------------------------------
// Host

Deno.test("an invalid Host answers 400 bad_request and cannot choose the route", async () => {
  await using api = await open({ RATE_LIMIT: "1000" });
  // The runtime builds Request.url from Host: this one would make /llms.txt look like the platform.
  for (const host of ["x/api/v1/platform?", "x?y", "x#y", "user@x", "a b"]) {
    const reply = await api.call("/llms.txt", { headers: { host } });
    assert.equal(reply.status, 400, host);
    assert.equal((reply.json as { error: { code: string } }).error.code, "bad_request", host);
    assert.ok(!reply.text.includes("developerResources"), `${host}: no platform body`);
  }
  for (
    const host of [
      "localhost",
      "localhost:8000",
      "127.0.0.1:1",
      "[::1]:8000",
      "discovery.example.com",
    ]
  ) {
    const reply = await api.call("/llms.txt", { headers: { host } });
    assert.equal(reply.status, 200, host);
  }
});
