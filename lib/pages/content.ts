/**
 * The service's content, read from `static/` at start-up and rendered when first needed.
 *
 * The operator edits Markdown (and `openapi.json`, `llms.txt`); `{{placeholder}}`s in them are filled
 * from the configuration, and HTML is rendered from the same Markdown, so the two representations of a
 * page never disagree. `{{api_reference}}` in a page is replaced by the API reference generated from the
 * filled `openapi.json` (see `api_reference.ts`). An unknown placeholder or a missing file is a start-up
 * error, not a broken page.
 *
 * Files are read, filled and parsed at start-up (`openapi.json` is filled as text, each value
 * escaped as a JSON string's content, then parsed; it is minified when first sent); each page's
 * HTML and the API reference are built the first time they are read (`Page` properties are getters
 * that build once).
 * A page's HTML comes from its template rendered at build time (`deno task render`, `prerender.ts`)
 * when its sources are those it was rendered from and the configuration's values are plain; only
 * otherwise is `marked` imported, by `prepareMarkdown()`, and the page rendered from its filled
 * Markdown. None of it delays the first response (lib/README.md, "Cold start").
 *
 * @module
 */

import { apiReferenceMarkdown, shellWord } from "./api_reference.ts";
import type { Config } from "../config/config.ts";
import { escapeMarkdownText, markdownToPlainText, unescapeMarkdown } from "./escape.ts";
import { once } from "../once.ts";
import { messageOf } from "../text/error_message.ts";
import { CONTROL_CHARACTERS } from "../text/control_characters.ts";
import { markdownLinksToTwins, type PageMeta, renderPage, type Site } from "./layout.ts";
import { sitemapXml } from "./sitemap.ts";
import { DEPRECATION_POLICY_PATH, PAGES, type SitePage } from "./site_pages.ts";
import type { Prerendered } from "./prerender.ts";
import type { BuiltRanks } from "./tokens.ts";

/**
 * The folder holding the operator's content, found next to the code: two folders above this module,
 * whether it is `lib/pages/` in the source (and a compiled binary) or `dist/app/` in the bundle that
 * `deno task start` runs.
 */
export const STATIC_DIR: string = staticDir(import.meta.dirname);

/**
 * `static/` two folders above `here` (this module's folder), by plain string handling: `node:path`
 * would load Node compatibility before the first response (lib/README.md, "Cold start").
 */
function staticDir(here: string | undefined): string {
  if (here === undefined) return "../../static";
  const separator = here.includes("\\") && !here.includes("/") ? "\\" : "/";
  const root = here.replace(/[\\/][^\\/]+[\\/][^\\/]+[\\/]?$/, "");
  return `${root}${separator}static`;
}

/** A page with both of its representations; each property is built the first time it is read. */
export interface Page {
  /** Layout metadata (title, description, path). */
  readonly meta: PageMeta;
  /** The Markdown, placeholders filled, its links to pages led to their twins (`layout.ts`). */
  readonly markdown: string;
  /** The whole HTML document. */
  readonly html: string;
}

/** Stands for `{{api_reference}}` in filled Markdown until the reference is generated. */
const API_REFERENCE_MARK = "\u0000api_reference\u0000";

/** Every body the service sends with 200, as text. */
export interface Content {
  /** `GET /api/v1/platform` as JSON (a Platform object). */
  platformJson: string;
  /** `GET /api/v1/platform` as Markdown. */
  platformMarkdown: string;
  /** `/`. */
  home: Page;
  /** `/developers` and `/api`. */
  developers: Page;
  /** `/developers/deprecation-policy` (and its `.md`). */
  deprecationPolicy: Page;
  /** `/openapi.json` and `/openapi`. */
  openapi: string;
  /** `/llms.txt`. */
  llms: string;
  /** `/robots.txt`, with the `Content-Signal` and `Sitemap` lines. */
  robots: string;
  /** `/sitemap.xml`: the pages and their Markdown twins. */
  sitemap: string;
  /** `/.well-known/api-catalog`. */
  apiCatalog: string;
  /** `/style.css`: the pages' only stylesheet. */
  stylesheet: string;
  /** `/favicon.svg`: the pages' icon. */
  icon: string;
  /** The rendered layout, for pages built elsewhere (the 404 page). */
  site: Site;
  /**
   * Prepares page `file` (every page when omitted) for rendering: its build-time rendering when that
   * applies, else the Markdown renderer (`marked`, imported on first need only). A page's `html` can
   * be read once this has resolved for it; until then reading it throws.
   */
  prepareMarkdown: (file?: PageFile) => Promise<void>;
  /** Where the token ranks the build wrote are found, as the static files' source gave it. */
  tokenRanks?: BuiltRanks;
}

/** The outcome of {@linkcode loadContent}. */
export type ContentResult = { ok: true; content: Content } | { ok: false; errors: string[] };

/** The pages' files in `static/`, in {@linkcode PAGES}' order. */
export const PAGE_FILES: readonly PageFile[] = PAGES.map(({ file }) => file);

/** A page's file in `static/`. */
export type PageFile = SitePage["file"];

/** The files read from {@linkcode STATIC_DIR}. */
export const STATIC_FILES = [
  ...PAGE_FILES,
  "platform.md",
  "llms.txt",
  "robots.txt",
  "openapi.json",
  "style.css",
  "favicon.svg",
] as const;

/** The values of the placeholders, by name. */
export function placeholders(config: Config): Record<string, string> {
  return {
    base_url: config.baseUrl,
    name: config.name,
    description: config.description,
    documentation_url: config.documentationUrl,
    developer_resources_url: config.developerResourcesUrl,
    openapi_url: config.openapiUrl,
    agent_instructions_url: config.agentInstructionsUrl,
    support_url: config.supportUrl,
    support_email: config.supportEmail,
    rate_limit: String(config.rateLimit),
    rate_limit_window: String(config.rateLimitWindowSeconds),
    rate_limit_accuracy: rateLimitAccuracy(config),
  };
}

/**
 * How exact the limit is, in the words the API description uses: exact, unless a shared store runs
 * `local-first`, where instances share their counts in the background.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(
 *   rateLimitAccuracy({ rateLimitStore: "redis", rateLimitConsistency: "exact" }),
 *   "exact sliding window",
 * );
 * assert.match(
 *   rateLimitAccuracy({ rateLimitStore: "kv", rateLimitConsistency: "local-first" }),
 *   /a few requests more than the limit/,
 * );
 * ```
 */
export function rateLimitAccuracy(
  config: Pick<Config, "rateLimitStore" | "rateLimitConsistency">,
): string {
  if (config.rateLimitStore === "memory" || config.rateLimitConsistency === "exact") {
    return "exact sliding window";
  }
  return "sliding window shared between the service's instances in the background, so a caller may briefly get a few requests more than the limit";
}

/**
 * Fills `{{name}}` placeholders in `text`.
 *
 * @param escape escapes a value for where it lands, given its placeholder's name and offset in
 * `text` (by default it is filled as it is)
 * @returns the text, and the names that have no value
 */
export function fill(
  text: string,
  values: Record<string, string>,
  escape: (value: string, name: string, at: number) => string = (value) => value,
): { text: string; unknown: string[] } {
  const unknown: string[] = [];
  const placeholder = /\{\{\s*([A-Za-z0-9_]+)\s*\}\}/g;
  const out = text.replace(placeholder, (whole, name: string, at: number) => {
    const value = values[name];
    if (value === undefined) {
      unknown.push(name);
      return whole;
    }
    return escape(value, name, at);
  });
  return { text: out, unknown };
}

/**
 * The placeholders whose values start-up validates to carry no Markdown meaning (links, addresses,
 * numbers: lib/config/), so they are filled as they are, links staying links (the `fill` of a
 * JSON text and `fillMarkdown` in the portal escape it apart, in a JSON or shell block). Every other value
 * is text, escaped for where it lands ({@linkcode fillMarkdown}).
 */
const VERBATIM_PLACEHOLDERS: ReadonlySet<string> = new Set([
  "base_url",
  "documentation_url",
  "developer_resources_url",
  "openapi_url",
  "agent_instructions_url",
  "support_url",
  "support_email",
  "rate_limit",
  "rate_limit_window",
  // The generated API reference's mark: Markdown the service wrote itself.
  "api_reference",
]);

/** A fenced code block's opening or closing line (CommonMark): its fence and info string. */
const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)/;

/** The info strings of the shell examples, whose values are quoted as shell words. */
const SHELL_INFO = /^(?:sh|bash|shell|console|zsh)$/i;

/**
 * Fills `{{name}}` placeholders in Markdown (a page, the Platform's Markdown, `llms.txt`), each value
 * escaped for where it lands: in a fenced `json` block as a JSON string's content, in a shell block
 * (`sh`, `bash`, `shell`, `console`) as a shell word ({@linkcode shellWord}), in another block as
 * it is (a value is one line, so it cannot close the block); elsewhere text values are
 * Markdown-escaped ({@linkcode escapeMarkdownText}) and {@linkcode VERBATIM_PLACEHOLDERS} filled as
 * they are.
 *
 * @returns the text, and the names that have no value
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const values = { name: "[x](javascript:y)", base_url: "https://x.example" };
 * const text = ["# {{name}}", "~~~json", '"{{name}}"', "~~~", "~~~sh", "curl {{base_url}}", "~~~"];
 * assert.deepEqual(fillMarkdown(text.join("\n"), values).text.split("\n"), [
 *   "# \\[x\\]\\(javascript:y\\)",
 *   "~~~json",
 *   '"[x](javascript:y)"',
 *   "~~~",
 *   "~~~sh",
 *   "curl https://x.example",
 *   "~~~",
 * ]);
 * ```
 */
export function fillMarkdown(
  text: string,
  values: Record<string, string>,
): { text: string; unknown: string[] } {
  const unknown: string[] = [];
  let fence: { mark: string; info: string } | undefined;
  const lines = text.split("\n").map((line) => {
    const found = FENCE.exec(line);
    if (found && fence === undefined) fence = { mark: found[1]!, info: found[2] ?? "" };
    else if (
      found && fence !== undefined && found[1]![0] === fence.mark[0] &&
      found[1]!.length >= fence.mark.length && found[2] === ""
    ) fence = undefined;
    else {
      const escape = escaperIn(fence?.info);
      const filled = fill(line, values, escape);
      unknown.push(...filled.unknown);
      return filled.text;
    }
    return line;
  });
  return { text: lines.join("\n"), unknown };
}

/** How a value is escaped in a fenced block with `info` (outside any block when `undefined`). */
function escaperIn(info: string | undefined): (value: string, name: string) => string {
  if (info === undefined) {
    return (value, name) => VERBATIM_PLACEHOLDERS.has(name) ? value : escapeMarkdownText(value);
  }
  if (info.toLowerCase() === "json") return (value) => JSON.stringify(value).slice(1, -1);
  if (SHELL_INFO.test(info)) return (value) => shellWord(value);
  return (value) => value;
}

/**
 * Fills a JSON text's placeholders, each value escaped as a JSON string's content; a text value
 * inside a longer `description` (which OpenAPI reads as CommonMark) is Markdown-escaped first, one
 * that is a whole string (an example's value) or anything else (a title) is not.
 */
function fillJson(
  text: string,
  values: Record<string, string>,
): { text: string; unknown: string[] } {
  return fill(text, values, (value, name, at) => {
    const markdown = !VERBATIM_PLACEHOLDERS.has(name) && inMarkdownDescription(text, at);
    return JSON.stringify(markdown ? escapeMarkdownText(value) : value).slice(1, -1);
  });
}

/** Whether offset `at` of a JSON text is inside a `"description"` string, not at its start. */
function inMarkdownDescription(text: string, at: number): boolean {
  let start = at - 1;
  while (start >= 0 && !(text[start] === '"' && text[start - 1] !== "\\")) start--;
  const end = text.indexOf("}}", at) + 2;
  // A whole string, `"{{description}}"`, is a value (an example's), not prose.
  if (start === at - 1 && text[end] === '"') return false;
  return /"description"\s*:\s*$/.test(text.slice(Math.max(0, start - 40), start));
}

/** The text of the first `# ` heading of a Markdown document. */
export function titleOf(markdown: string): string | undefined {
  const heading = /^#\s+(.+?)\s*#*\s*$/m.exec(markdown)?.[1];
  return heading === undefined ? undefined : unescapeMarkdown(heading);
}

/**
 * The `<title>` of a page: its heading, with the product name appended when the heading lacks it, so
 * every title is distinct and says whose it is.
 */
export function pageTitle(heading: string | undefined, name: string): string {
  if (heading === undefined) return name;
  return heading.includes(name) ? heading : `${heading} · ${name}`;
}

/** The first paragraph of a Markdown document as plain text, for `<meta name="description">`. */
export function summaryOf(markdown: string): string | undefined {
  for (const block of markdown.split(/\n\s*\n/)) {
    const text = block.trim();
    if (text === "" || /^(#|[-*+] |\d+\. |```|\||>)/.test(text)) continue;
    return markdownToPlainText(text).replace(/\s+/g, " ");
  }
  return undefined;
}

function unreadableDirMessage(dir: string, error: UnreadableFolderError): string {
  return error.reason === "not-granted"
    ? `static/ (${dir}) may not be read by this process: grant --allow-read for that folder (deno task start does)`
    : `static/ (${dir}) is not readable by this user: give the service's user read access to that folder`;
}

/**
 * What a reader of {@linkcode loadContent} throws when the folder itself may not be read (the runtime
 * did not grant it, or the user lacks the right): one sentence for the folder rather than one per
 * file. The runtime's own errors are translated where the runtime is (`lib/server/static_files.ts`),
 * so that this module names no runtime API.
 */
export class UnreadableFolderError extends Error {
  /** Not granted by the runtime's permissions, or denied by the file system. */
  readonly reason: "not-granted" | "denied";

  /** An unreadable folder, for `reason`. */
  constructor(reason: "not-granted" | "denied", options?: ErrorOptions) {
    super(`the folder may not be read (${reason})`, options);
    this.name = "UnreadableFolderError";
    this.reason = reason;
  }
}

/** Where {@linkcode loadContent} reads the static files: a folder and a reader of a file's text. */
export interface StaticFiles {
  /** The folder (default {@linkcode STATIC_DIR}). */
  dir?: string;
  /**
   * Reads a file's text: from the disk under Deno (`lib/server/static_files.ts`), from the bundle on
   * Workers (`lib/workers/`), from a record in tests. Throws {@linkcode UnreadableFolderError} when
   * the folder may not be read at all.
   */
  read: (path: string) => string;
  /** Where the token ranks the build wrote are found (`tokens.ts`); the build's module when absent. */
  tokenRanks?: BuiltRanks;
}

/** The files of {@linkcode STATIC_FILES}, by name. */
type StaticTexts = Record<typeof STATIC_FILES[number], string>;

/** The files filled, but `openapi.json`: it is kept parsed, and minified when first read. */
type FilledTexts = Omit<StaticTexts, "openapi.json">;

/**
 * Reads, fills and renders everything under `dir`.
 *
 * @param source the folder and its reader: the disk, the bundle, or an in-memory folder in tests
 */
export function loadContent(config: Config, source: StaticFiles): ContentResult {
  const dir = source.dir ?? STATIC_DIR;
  const read = source.read;
  const values = placeholders(config);
  const loaded = readStaticFiles(dir, read, values, config.contentSignal);
  if (!loaded.ok) return loaded;
  const { files, raw, openapiDocument } = loaded;
  const site: Site = { name: config.name, baseUrl: config.baseUrl, supportUrl: config.supportUrl };
  const sources = {
    ...Object.fromEntries(PAGE_FILES.map((file) => [file, pageSources(file, raw)])) as Record<
      PageFile,
      string[]
    >,
    "openapi.json": raw["openapi.json"],
  };
  const pages = pageRenderer(sources, values);
  let openapi: string | undefined;
  const page = pageBuilder(
    config,
    site,
    pages.render,
    () => pages.apiReference() ?? apiReferenceMarkdown(openapiDocument),
  );
  const content: Content = {
    platformJson: platformJson(config),
    platformMarkdown: files["platform.md"],
    ...Object.fromEntries(
      PAGES.map(({ file, content, path, twin }) => [content, page(file, files[file], path, twin)]),
    ) as Record<SitePage["content"], Page>,
    // Minified when first sent, not at start-up (0.7 ms of loadContent's 3-5: lib/README.md, "Cold
    // start").
    get openapi() {
      return openapi ??= JSON.stringify(openapiDocument);
    },
    llms: files["llms.txt"],
    robots: files["robots.txt"],
    get sitemap() {
      return sitemapXml(config.baseUrl);
    },
    stylesheet: files["style.css"],
    icon: files["favicon.svg"],
    apiCatalog: apiCatalogJson(config.baseUrl),
    site,
    prepareMarkdown: pages.prepare,
    ...(source.tokenRanks ? { tokenRanks: source.tokenRanks } : {}),
  };
  return { ok: true, content };
}

/**
 * Reads and fills every static file. openapi.json comes first: the pages' `{{api_reference}}` is
 * generated from the filled document when a page using it is first read; until then a mark holds
 * its place.
 */
function readStaticFiles(
  dir: string,
  read: (path: string) => string,
  values: Record<string, string>,
  contentSignal: string,
):
  | { ok: true; files: FilledTexts; raw: StaticTexts; openapiDocument: unknown }
  | { ok: false; errors: string[] } {
  const errors: string[] = [];
  const files: Partial<FilledTexts> = {};
  const sources: Partial<StaticTexts> = {};
  let openapiDocument: unknown;
  const order = [
    "openapi.json",
    ...STATIC_FILES.filter((name) => name !== "openapi.json"),
  ] as const;
  for (const name of order) {
    let raw: string;
    try {
      raw = read(`${dir}/${name}`);
    } catch (error) {
      if (error instanceof UnreadableFolderError) {
        // One sentence for the folder rather than one per file: the fix is the same for all.
        return { ok: false, errors: [unreadableDirMessage(dir, error)] };
      }
      errors.push(`static/${name} could not be read: ${messageOf(error)}`);
      continue;
    }
    sources[name] = raw;
    const filled = name === "robots.txt"
      ? fillStaticFile(name, raw, { ...robotsValues(values), content_signal: contentSignal })
      : fillStaticFile(name, raw, values);
    if (filled.error !== undefined) errors.push(filled.error);
    if (filled.text !== undefined && name !== "openapi.json") files[name] = filled.text;
    if (name === "openapi.json") openapiDocument = filled.json;
  }
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, files: files as FilledTexts, raw: sources as StaticTexts, openapiDocument };
}

/** One static file filled as its kind requires: JSON value by value, text by text, CSS and SVG as is. */
function fillStaticFile(
  name: typeof STATIC_FILES[number],
  raw: string,
  values: Record<string, string>,
): { text?: string; json?: unknown; error?: string } {
  if (name.endsWith(".json")) {
    // Filled as text, each value escaped for a JSON string; then parsed (minified when first sent).
    const filled = fillJson(raw, values);
    let json: unknown;
    try {
      json = JSON.parse(filled.text);
    } catch (error) {
      return { error: `static/${name} is not valid JSON: ${messageOf(error)}` };
    }
    return filled.unknown.length > 0
      ? { json, error: unknownMessage(name, filled.unknown) }
      : { json };
  }
  if (name.endsWith(".css") || name.endsWith(".svg")) return { text: raw };
  // platform.md is served as it is, not as a page: it has no API reference.
  const pageValues = name.endsWith(".md") && name !== "platform.md"
    ? { ...values, api_reference: API_REFERENCE_MARK }
    : values;
  // robots.txt is no Markdown: its values are one line each, inside its comments.
  const filled = name.endsWith(".txt") && name !== "llms.txt"
    ? fill(raw, pageValues)
    : fillMarkdown(raw, pageValues);
  return filled.unknown.length > 0
    ? { text: filled.text, error: unknownMessage(name, filled.unknown) }
    : { text: filled.text };
}

/**
 * The values as robots.txt takes them: one line each (a line break or other control character
 * becomes a space), so that no value can add a rule or end a comment (RFC 9309 section 2.2).
 * `{{content_signal}}` is robots.txt's own placeholder: the validated `CONTENT_SIGNAL`.
 */
function robotsValues(values: Record<string, string>): Record<string, string> {
  const controls = new RegExp(CONTROL_CHARACTERS, "g");
  return Object.fromEntries(
    Object.entries(values).map(([name, value]) => [name, value.replace(controls, " ")]),
  );
}

/** `{{api_reference}}`, as {@linkcode fill} finds it. */
const API_REFERENCE_PLACEHOLDER = /\{\{\s*api_reference\s*\}\}/;

/**
 * The Markdown sources a page is rendered from, as read from `static/`: its file, then
 * `openapi.json` when it holds the API reference. Their digest keys its prerendered HTML.
 */
export function pageSources(file: PageFile, raw: Readonly<Record<string, string>>): string[] {
  const page = raw[file] ?? "";
  return API_REFERENCE_PLACEHOLDER.test(page) ? [page, raw["openapi.json"] ?? ""] : [page];
}

/**
 * Each page's Markdown filled with `values`, `{{api_reference}}` generated from `openapi.json`
 * filled with them too: what `deno task render` renders (with sentinels as values).
 *
 * @throws Error when a file is missing, openapi.json is not JSON or a placeholder is unknown
 */
export function filledPages(
  raw: Readonly<Record<string, string>>,
  values: Record<string, string>,
): Record<PageFile, string> {
  const text = (name: typeof STATIC_FILES[number]) => {
    const source = raw[name];
    if (source === undefined) throw new Error(`static/${name} is missing`);
    const filled = fillStaticFile(name, source, values);
    if (filled.error !== undefined || filled.text === undefined) throw new Error(filled.error);
    return filled;
  };
  const reference = apiReferenceOf(raw, values);
  const page = (file: PageFile) => text(file).text!.replaceAll(API_REFERENCE_MARK, reference);
  return Object.fromEntries(PAGE_FILES.map((file) => [file, page(file)])) as Record<
    PageFile,
    string
  >;
}

/**
 * The API reference generated from `openapi.json` filled with `values`.
 *
 * @throws Error when openapi.json is missing, not JSON or has an unknown placeholder
 */
export function apiReferenceOf(
  raw: Readonly<Record<string, string>>,
  values: Record<string, string>,
): string {
  const filled = fillStaticFile("openapi.json", raw["openapi.json"] ?? "", values);
  if (filled.error !== undefined) throw new Error(filled.error);
  return apiReferenceMarkdown(filled.json);
}

/** Renders a page's content: its prerendered HTML when it applies, else its Markdown by `marked`. */
type RenderPage = (file: PageFile, markdown: () => string) => string;

/**
 * The pages' renderer. `prepare(file)` imports the prerendered pages (`prerendered.json`) and keeps
 * that page's HTML filled with `values` when its sources' digest matches and every value is plain
 * (`prerender.ts`), and, for a page holding the API reference, the reference's Markdown likewise;
 * only when the page is left over does it import `marked` (lib/README.md, "Cold start"). Each page
 * is prepared on its own, so that the first request of `/` digests and fills `index.md` only, not
 * the API reference and `openapi.json`. `render` throws until `prepare` has resolved for the page;
 * `apiReference` is `undefined` until then, or when the reference must be generated.
 */
function pageRenderer(
  sources: Readonly<Record<PageFile, string[]> & { "openapi.json": string }>,
  values: Readonly<Record<string, string>>,
): {
  prepare: (file?: PageFile) => Promise<void>;
  render: RenderPage;
  apiReference: () => string | undefined;
} {
  const prerendered = new Map<PageFile, string>();
  let apiReference: string | undefined;
  let renderer: ((markdown: string) => string) | undefined;
  // Imported when a page is first prepared, not statically: a first response that is no page
  // loads neither.
  const modules = once(async () => {
    const [{ default: generated }, prerender] = await Promise.all([
      import("./prerendered.json", { with: { type: "json" } }),
      import("./prerender.ts"),
    ]);
    return { generated: generated as unknown as Partial<Prerendered>, ...prerender };
  });
  const reference = once(async () => {
    const { generated, fillTemplate, sourceDigest } = await modules();
    const template = generated.apiReference;
    if (template?.digest === await sourceDigest([sources["openapi.json"]])) {
      apiReference = fillTemplate(template.parts, values);
    }
  });
  const preparePage = (file: PageFile) =>
    once(async () => {
      const { generated, fillTemplate, sourceDigest } = await modules();
      const page = generated.pages?.[file];
      // A page holding the API reference (its sources include openapi.json) needs it too.
      const [digest] = await Promise.all([
        page === undefined ? undefined : sourceDigest(sources[file]),
        sources[file].length > 1 ? reference() : undefined,
      ]);
      const html = page !== undefined && page.digest === digest
        ? fillTemplate(page.parts, values)
        : undefined;
      if (html !== undefined) prerendered.set(file, html);
      else renderer ??= (await import("./markdown.ts")).markdownRenderer();
    });
  const prepared = new Map(PAGE_FILES.map((file) => [file, preparePage(file)]));
  return {
    prepare: (file) =>
      file === undefined
        ? Promise.all(PAGE_FILES.map((each) => prepared.get(each)!())).then(() => {})
        : prepared.get(file)!(),
    apiReference: () => apiReference,
    render: (file, markdown) => {
      const html = prerendered.get(file);
      if (html !== undefined) return html;
      if (renderer === undefined) {
        throw new Error("a page was built before its renderer was loaded (prepareMarkdown)");
      }
      return renderer(markdown());
    },
  };
}

/**
 * The Markdown before `{{api_reference}}`'s mark, cut after its last blank line: the blocks in it
 * read the same once the reference is generated, so a title and summary found there are the page's.
 */
function blocksBeforeReference(text: string): string | undefined {
  const cut = text.indexOf(API_REFERENCE_MARK);
  if (cut < 0) return text;
  const blocks = text.slice(0, cut).split(/\n\s*\n/);
  blocks.pop();
  return blocks.length > 0 ? blocks.join("\n\n") : undefined;
}

/**
 * Builds a page from its filled Markdown: its `{{api_reference}}` mark replaced by the reference
 * (generated once, when the first page using it needs its Markdown), its metadata, and its HTML in
 * the layout. A prerendered page needs neither the reference nor `marked` for its HTML.
 */
function pageBuilder(
  config: Config,
  site: Site,
  render: RenderPage,
  buildApiReference: () => string,
): (file: PageFile, text: string, path: string, markdownPath: string) => Page {
  let apiReference: string | undefined;
  const withReference = (markdown: string) =>
    markdown.includes(API_REFERENCE_MARK)
      ? markdown.replaceAll(API_REFERENCE_MARK, apiReference ??= buildApiReference())
      : markdown;
  return (file, text, path, markdownPath) => {
    const markdown = once(() => withReference(text));
    const served = once(() => markdownLinksToTwins(markdown(), config.baseUrl));
    const meta = once((): PageMeta => {
      const head = blocksBeforeReference(text);
      const title = head === undefined ? undefined : titleOf(head);
      const summary = head === undefined ? undefined : summaryOf(head);
      const whole = title === undefined || summary === undefined ? markdown() : undefined;
      return {
        path,
        title: pageTitle(whole === undefined ? title : titleOf(whole), config.name),
        description: (whole === undefined ? summary : summaryOf(whole)) ?? config.description,
        markdownUrl: config.baseUrl + markdownPath,
      };
    });
    const html = once(() => renderPage(render(file, markdown), meta(), site));
    return {
      get meta() {
        return meta();
      },
      get markdown() {
        return served();
      },
      get html() {
        return html();
      },
    };
  };
}

/** The Platform document (spec section 3) of a configuration. */
function platformJson(config: Config): string {
  return JSON.stringify({
    name: config.name,
    description: config.description,
    documentation: config.documentationUrl,
    developerResources: config.developerResourcesUrl,
    openapi: config.openapiUrl,
    agentInstructions: config.agentInstructionsUrl,
    support: config.supportUrl,
  });
}

/** The RFC 9727 API catalog (a linkset) of the service at `base`. */
function apiCatalogJson(base: string): string {
  return JSON.stringify({
    linkset: [
      { anchor: `${base}/.well-known/api-catalog`, item: [{ href: `${base}/api/v1/platform` }] },
      {
        anchor: `${base}/api/v1/platform`,
        "service-desc": [{
          href: `${base}/openapi.json`,
          type: "application/vnd.oai.openapi+json;version=3.1",
        }],
        "service-doc": [{ href: `${base}/developers`, type: "text/html" }],
        // RFC 9727 section 4.1 recommends usage policies: the versioning and removal policy.
        deprecation: [{ href: `${base}${DEPRECATION_POLICY_PATH}`, type: "text/html" }],
      },
    ],
  });
}

function unknownMessage(file: string, names: string[]): string {
  return `static/${file} uses unknown placeholder${names.length === 1 ? "" : "s"} ${
    [...new Set(names)].map((n) => `{{${n}}}`).join(", ")
  }`;
}
