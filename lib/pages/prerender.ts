/**
 * The portal's pages rendered at build time (`deno task render`), so that serving one needs no
 * Markdown renderer (lib/README.md, "Cold start").
 *
 * A page's Markdown is filled from the configuration before it is rendered, and the configuration
 * differs per deployment. So the build fills it with a stable sentinel per placeholder instead
 * (a URL for URLs, an address for addresses, a word for the rest), renders that with the renderer
 * of `markdown.ts`, and stores the HTML as a template: literal HTML, and where each sentinel was.
 * At run time a template is filled with the configuration's values, each escaped as `marked`
 * escapes it (or slugged, inside a heading's `id`). That equals rendering the filled Markdown only
 * when a value has no Markdown meaning of its own and autolinks like its sentinel, so a value is
 * used only when it is *plain* ({@linkcode PLAIN}: letters and digits with a few separators, URLs of
 * such segments, addresses of such parts); with any other value, or a page whose Markdown sources
 * no longer match the template's digest (an operator edited `static/`), the page is rendered by
 * `marked` as before. `tests/pages/prerender_test.ts` compares both against `marked` for many
 * configurations.
 *
 * @module
 */

import { escapeRegExp } from "./escape.ts";
import { escapeHtml } from "./layout.ts";
import { sha256Hex } from "../text/sha256_hex.ts";

/**
 * Where a placeholder's value goes in a template: HTML text (escaped), a heading's `id` (its slug)
 * or Markdown (as it is).
 */
export type Slot = readonly [placeholder: string, as: "text" | "slug" | "markdown"];

/** One part of a template: literal HTML or a slot. */
export type TemplatePart = string | Slot;

/** A page rendered at build time. */
export interface PrerenderedPage {
  /** {@linkcode sourceDigest} of the Markdown sources the page was rendered from. */
  digest: string;
  /** The rendered content HTML (the layout is not included), as a template. */
  parts: readonly TemplatePart[];
}

/** The prerendered pages, by the name of their file in `static/`. */
export type PrerenderedPages = Readonly<Record<string, PrerenderedPage>>;

/** What `deno task render` writes to `prerendered.json`. */
export interface Prerendered {
  /** The pages' content HTML. */
  pages: PrerenderedPages;
  /** The API reference's Markdown (`digest` of `openapi.json` alone). */
  apiReference: PrerenderedPage;
}

const WORD = "[A-Za-z0-9]+";
/** Words separated by single spaces: the product name (its slug is the words, lowercased). */
const WORDS = `${WORD}(?: ${WORD})*`;
/**
 * A sentence: words separated by spaces, commas, semicolons, colons, apostrophes and hyphens, the
 * first one starting with a letter (`1.` at the start of a paragraph would begin a list).
 */
const SENTENCE = `[A-Za-z][A-Za-z0-9]*(?:[ ,;:'-]+${WORD})*\\.?`;
/** Dot- or hyphen-separated words: a host name, a path segment, a mailbox's parts. */
const LABELS = `${WORD}(?:[.-]${WORD})*`;
/** An http(s) URL of such labels, with a port and a path, ending in a label (the base URL). */
const BASE_URL = `https?://${LABELS}(?::[0-9]{1,5})?(?:/${LABELS})*`;
/** A base URL, or one ending in `/`. */
const URL_PATTERN = `${BASE_URL}/?`;
/** An address as marked autolinks it whole: its domain has a dot. */
const EMAIL = `${WORD}(?:[.+-]${WORD})*@${WORD}(?:-${WORD})*(?:\\.${WORD}(?:-${WORD})*)+`;

/** Each placeholder's sentinel: the value the build fills in, of the same shape as a plain value. */
export const SENTINELS: Readonly<Record<string, string>> = {
  base_url: "https://zqxbaseurlzqx.invalid",
  documentation_url: "https://zqxdocumentationurlzqx.invalid",
  developer_resources_url: "https://zqxdeveloperresourcesurlzqx.invalid",
  openapi_url: "https://zqxopenapiurlzqx.invalid",
  agent_instructions_url: "https://zqxagentinstructionsurlzqx.invalid",
  support_url: "mailto:zqxsupporturlzqx@zqxsupporturl.invalid",
  support_email: "zqxsupportemailzqx@zqxsupportemail.invalid",
  name: "zqxnamezqx",
  description: "zqxdescriptionzqx",
  rate_limit: "zqxratelimitzqx",
  rate_limit_window: "zqxratelimitwindowzqx",
  rate_limit_accuracy: "zqxratelimitaccuracyzqx",
};

/**
 * The values a template may be filled with, by placeholder: the rest are rendered by `marked`. (A
 * sentence holds a `.` only at its end, so never a `www.` that marked would autolink.)
 */
export const PLAIN: Readonly<Record<string, RegExp>> = {
  base_url: new RegExp(`^${BASE_URL}$`),
  documentation_url: new RegExp(`^${URL_PATTERN}$`),
  developer_resources_url: new RegExp(`^${URL_PATTERN}$`),
  openapi_url: new RegExp(`^${URL_PATTERN}$`),
  agent_instructions_url: new RegExp(`^${URL_PATTERN}$`),
  // The shipped pages hold the support URL only as a link's target and in code: either shape fits.
  support_url: new RegExp(`^(?:mailto:${EMAIL}|${URL_PATTERN})$`),
  support_email: new RegExp(`^${EMAIL}$`),
  name: new RegExp(`^${WORDS}$`),
  description: new RegExp(`^${SENTENCE}$`),
  rate_limit: new RegExp(`^${WORD}$`),
  rate_limit_window: new RegExp(`^${WORD}$`),
  rate_limit_accuracy: new RegExp(`^${SENTENCE}$`),
};

/**
 * Whether `value` may fill the slots of `placeholder` ({@linkcode PLAIN}).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(isPlain("base_url", "https://api.example.com:8443/discovery"), true);
 * assert.equal(isPlain("base_url", "https://api.example.com/a&b"), false);
 * assert.equal(isPlain("name", "Acme <Legal>"), false);
 * ```
 */
export function isPlain(placeholder: string, value: string): boolean {
  const pattern = PLAIN[placeholder];
  return pattern !== undefined && pattern.test(value);
}

/** The GitHub slug of plain words (github-slugger lowercases, then turns spaces into hyphens). */
function slugOf(words: string): string {
  return words.toLowerCase().replaceAll(" ", "-");
}

/** The `id` attributes of headings, as `marked-gfm-heading-id` writes them. */
const HEADING_ID = /<h[1-6] id="([^"]*)">/g;

/**
 * Fills a template with `values`: `undefined` when a slot's value is not plain or two headings end
 * up with one `id` (`marked` would have numbered the second), so the page must be rendered instead.
 */
export function fillTemplate(
  parts: readonly TemplatePart[],
  values: Readonly<Record<string, string>>,
): string | undefined {
  let html = "";
  for (const part of parts) {
    if (typeof part === "string") {
      html += part;
      continue;
    }
    const [placeholder, as] = part;
    const value = values[placeholder];
    if (value === undefined || !isPlain(placeholder, value)) return undefined;
    html += as === "slug" ? slugOf(value) : as === "text" ? escapeHtml(value) : value;
  }
  const ids = [...html.matchAll(HEADING_ID)].map((match) => match[1]);
  return new Set(ids).size === ids.length ? html : undefined;
}

/** Separates the sources in a digest's input (the files are text: they hold no NUL). */
const SOURCE_SEPARATOR = "\u0000";

/**
 * The SHA-256 (hex) of a page's Markdown sources: its file in `static/`, then `openapi.json` when
 * the page holds the API reference.
 */
export async function sourceDigest(sources: readonly string[]): Promise<string> {
  const bytes = new TextEncoder().encode(sources.join(SOURCE_SEPARATOR));
  return await sha256Hex(bytes);
}

/**
 * The template of HTML rendered from Markdown filled with {@linkcode SENTINELS}: every sentinel
 * becomes a slot, as its slug inside a heading's `id`, as escaped text elsewhere.
 *
 * @throws Error when a sentinel appears in another form (the build cannot place its value)
 */
export function templateOf(html: string): TemplatePart[] {
  const byForm = new Map<string, Slot>();
  for (const [placeholder, sentinel] of Object.entries(SENTINELS)) {
    byForm.set(escapeHtml(sentinel), [placeholder, "text"]);
    if (/^[a-z]+$/.test(sentinel)) byForm.set(`id:${sentinel}`, [placeholder, "slug"]);
  }
  const names = Object.values(SENTINELS).sort((a, b) => b.length - a.length).map(escapeRegExp);
  const pattern = new RegExp(`(?<=<h[1-6] id="[^"]*)(${names.join("|")})|${names.join("|")}`, "g");
  const parts: TemplatePart[] = [];
  let last = 0;
  for (const match of html.matchAll(pattern)) {
    const slot = byForm.get(match[1] === undefined ? match[0] : `id:${match[1]}`);
    if (slot === undefined) throw new Error(`a sentinel in an unexpected form: ${match[0]}`);
    parts.push(html.slice(last, match.index), slot);
    last = match.index + match[0].length;
  }
  parts.push(html.slice(last));
  return parts.filter((part) => part !== "");
}

/**
 * The template of Markdown generated with {@linkcode SENTINELS} as values: every sentinel becomes
 * a slot for the value as it is.
 */
export function markdownTemplateOf(markdown: string): TemplatePart[] {
  const names = Object.keys(SENTINELS).sort((a, b) => SENTINELS[b]!.length - SENTINELS[a]!.length);
  const pattern = new RegExp(names.map((name) => escapeRegExp(SENTINELS[name]!)).join("|"), "g");
  const parts: TemplatePart[] = [];
  let last = 0;
  for (const match of markdown.matchAll(pattern)) {
    const placeholder = names.find((name) => SENTINELS[name] === match[0])!;
    parts.push(markdown.slice(last, match.index), [placeholder, "markdown"]);
    last = match.index + match[0].length;
  }
  parts.push(markdown.slice(last));
  return parts.filter((part) => part !== "");
}

/** Any sentinel's distinctive mark, to check that a template holds none outside its slots. */
export const SENTINEL_MARK = "zqx";
