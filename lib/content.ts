/**
 * The service's content, read from `static/` and rendered once at start-up.
 *
 * The operator edits Markdown (and `openapi.json`, `llms.txt`); `{{placeholder}}`s in them are filled
 * from the configuration, and HTML is rendered from the same Markdown, so the two representations of a
 * page never disagree. `{{api_reference}}` in a page is replaced by the API reference generated from the
 * filled `openapi.json` (see `api_reference.ts`). An unknown placeholder or a missing file is a start-up
 * error, not a broken page.
 *
 * @module
 */

import { Marked, Renderer, type Tokens } from "marked";
import { gfmHeadingId } from "marked-gfm-heading-id";
import { join } from "node:path";
import { apiReferenceMarkdown } from "./api_reference.ts";
import type { Config } from "./config.ts";
import { escapeHtml, type PageMeta, renderPage, type Site } from "./layout.ts";

/** The folder holding the operator's content, found next to the code (works in a compiled binary). */
export const STATIC_DIR: string = join(import.meta.dirname ?? ".", "..", "static");

/** A page with both of its representations. */
export interface Page {
  /** Layout metadata (title, description, path). */
  meta: PageMeta;
  /** The Markdown, placeholders filled. */
  markdown: string;
  /** The whole HTML document. */
  html: string;
}

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
  /** `/robots.txt`. */
  robots: string;
  /** `/.well-known/api-catalog`. */
  apiCatalog: string;
  /** `/style.css`: the pages' only stylesheet. */
  stylesheet: string;
  /** `/favicon.svg`: the pages' icon. */
  icon: string;
  /** The rendered layout, for pages built elsewhere (the 404 page). */
  site: Site;
  /** Renders Markdown to HTML the way pages are rendered (raw HTML escaped). */
  renderMarkdown: (markdown: string) => string;
}

/** The outcome of {@linkcode loadContent}. */
export type ContentResult = { ok: true; content: Content } | { ok: false; errors: string[] };

/** The files read from {@linkcode STATIC_DIR}. */
export const STATIC_FILES = [
  "index.md",
  "developers.md",
  "deprecation-policy.md",
  "platform.md",
  "llms.txt",
  "robots.txt",
  "openapi.json",
  "style.css",
  "favicon.svg",
] as const;

/**
 * A Markdown renderer that escapes raw HTML: content can never inject markup or scripts into a page.
 * Headings get GitHub-style ids (linkable sections); a heading whose GitHub slug is empty (its text
 * has no letter or digit, like the path `/`) gets `section-<n>` instead of an invalid empty id. Tables
 * are wrapped in a focusable `<section>` that scrolls sideways on narrow screens, so keyboard users
 * can scroll it too (WCAG 2.1.1); its label names the heading above it and the columns, and is made
 * unique on the page, so screen readers can tell the regions apart.
 */
function markdownRenderer(): (markdown: string) => string {
  let heading = "";
  const labels = new Set<string>();
  const marked = new Marked({ gfm: true }, gfmHeadingId(), {
    hooks: {
      preprocess(markdown: string) {
        heading = "";
        labels.clear();
        return markdown;
      },
      postprocess(html: string) {
        let unnamed = 0;
        // marked-gfm-heading-id numbers repeated empty slugs "-1", "-2"...: all are unnamed.
        return html.replace(/<h([1-6]) id="(?:-\d+)?">/g, (_, level) => {
          unnamed += 1;
          return `<h${level} id="section-${unnamed}">`;
        });
      },
    },
    renderer: {
      html({ text }) {
        return escapeHtml(text);
      },
      heading({ text }) {
        heading = text.replaceAll("`", "");
        return false;
      },
      table(this: Renderer, token: Tokens.Table) {
        const columns = token.header.map((cell) => cell.text.replaceAll("`", "")).join(", ");
        const label = uniqueLabel(
          heading ? `${heading}: table of ${columns}` : `Table of ${columns}`,
          labels,
        );
        return `<section class="table-scroll" tabindex="0" aria-label="${escapeHtml(label)}">\n${
          Renderer.prototype.table.call(this, token)
        }</section>\n`;
      },
    },
  });
  return (markdown) => marked.parse(markdown, { async: false });
}

/** `label`, or `label (2)`, `label (3)`... when the page already has it; remembers the result. */
function uniqueLabel(label: string, used: Set<string>): string {
  let unique = label;
  for (let n = 2; used.has(unique); n++) unique = `${label} (${n})`;
  used.add(unique);
  return unique;
}

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
 */
export function rateLimitAccuracy(config: Config): string {
  if (config.rateLimitStore === "memory" || config.rateLimitConsistency === "exact") {
    return "exact sliding window";
  }
  return "sliding window shared between the service's instances in the background, so a caller may briefly get a few requests more than the limit";
}

/**
 * Fills `{{name}}` placeholders in `text`.
 *
 * @returns the text, and the names that have no value
 */
export function fill(
  text: string,
  values: Record<string, string>,
): { text: string; unknown: string[] } {
  const unknown: string[] = [];
  const out = text.replace(/\{\{\s*([A-Za-z0-9_]+)\s*\}\}/g, (whole, name: string) => {
    const value = values[name];
    if (value === undefined) {
      unknown.push(name);
      return whole;
    }
    return value;
  });
  return { text: out, unknown };
}

/** Fills placeholders in every string of a parsed JSON value. */
function fillJson(value: unknown, values: Record<string, string>, unknown: string[]): unknown {
  if (typeof value === "string") {
    const filled = fill(value, values);
    unknown.push(...filled.unknown);
    return filled.text;
  }
  if (Array.isArray(value)) return value.map((item) => fillJson(item, values, unknown));
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, fillJson(v, values, unknown)]),
    );
  }
  return value;
}

/** The text of the first `# ` heading of a Markdown document. */
export function titleOf(markdown: string): string | undefined {
  return /^#\s+(.+?)\s*#*\s*$/m.exec(markdown)?.[1];
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
    return text.replace(/\[([^\]]*)\]\([^)]*\)/g, "$1").replace(/[*_`]/g, "").replace(/\s+/g, " ");
  }
  return undefined;
}

function unreadableDirMessage(dir: string, error: Error): string {
  return error instanceof Deno.errors.NotCapable
    ? `static/ (${dir}) may not be read by this process: grant --allow-read for that folder (deno task start does)`
    : `static/ (${dir}) is not readable by this user: give the service's user read access to that folder`;
}

/**
 * Reads, fills and renders everything under `dir`.
 *
 * @param read reads a file's text; injected so tests can use an in-memory folder
 */
export function loadContent(
  config: Config,
  options: { dir?: string; read?: (path: string) => string } = {},
): ContentResult {
  const dir = options.dir ?? STATIC_DIR;
  const read = options.read ?? ((path: string) => Deno.readTextFileSync(path));
  const errors: string[] = [];
  const values = placeholders(config);
  const files: Partial<Record<typeof STATIC_FILES[number], string>> = {};

  // openapi.json first: the pages' `{{api_reference}}` is generated from the filled document. Until
  // then it is empty, so a broken openapi.json is reported once, not again by every page using it.
  const pageValues: Record<string, string> = { ...values, api_reference: "" };
  const order = [
    "openapi.json",
    ...STATIC_FILES.filter((name) => name !== "openapi.json"),
  ] as const;
  for (const name of order) {
    let raw: string;
    try {
      raw = read(join(dir, name));
    } catch (error) {
      if (
        error instanceof Deno.errors.NotCapable || error instanceof Deno.errors.PermissionDenied
      ) {
        // One sentence for the folder rather than one per file: the fix is the same for all.
        return { ok: false, errors: [unreadableDirMessage(dir, error)] };
      }
      errors.push(
        `static/${name} could not be read: ${
          error instanceof Error ? error.message : String(error)
        }`,
      );
      continue;
    }
    if (name.endsWith(".json")) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(raw);
      } catch (error) {
        errors.push(
          `static/${name} is not valid JSON: ${
            error instanceof Error ? error.message : String(error)
          }`,
        );
        continue;
      }
      const unknown: string[] = [];
      const filledJson = fillJson(parsed, values, unknown);
      files[name] = JSON.stringify(filledJson);
      if (unknown.length > 0) errors.push(unknownMessage(name, unknown));
      if (name === "openapi.json" && unknown.length === 0) {
        try {
          pageValues.api_reference = apiReferenceMarkdown(filledJson);
        } catch (error) {
          errors.push(
            `static/${name}: the API reference cannot be generated: ${
              error instanceof Error ? error.message : String(error)
            }`,
          );
        }
      }
    } else if (name.endsWith(".css") || name.endsWith(".svg")) {
      files[name] = raw;
    } else {
      const filled = fill(raw, name.endsWith(".md") ? pageValues : values);
      files[name] = filled.text;
      if (filled.unknown.length > 0) errors.push(unknownMessage(name, filled.unknown));
    }
  }
  if (errors.length > 0) return { ok: false, errors };

  const site: Site = { name: config.name, baseUrl: config.baseUrl, supportUrl: config.supportUrl };
  const render = markdownRenderer();
  const page = (file: string, path: string, markdownPath: string): Page => {
    const markdown = files[file as typeof STATIC_FILES[number]]!;
    const meta: PageMeta = {
      path,
      title: pageTitle(titleOf(markdown), config.name),
      description: summaryOf(markdown) ?? config.description,
      markdownUrl: config.baseUrl + markdownPath,
    };
    return { meta, markdown, html: renderPage(render(markdown), meta, site) };
  };

  const base = config.baseUrl;
  const content: Content = {
    platformJson: JSON.stringify({
      name: config.name,
      description: config.description,
      documentation: config.documentationUrl,
      developerResources: config.developerResourcesUrl,
      openapi: config.openapiUrl,
      agentInstructions: config.agentInstructionsUrl,
      support: config.supportUrl,
    }),
    platformMarkdown: files["platform.md"]!,
    home: page("index.md", "/", "/"),
    developers: page("developers.md", "/developers", "/developers"),
    deprecationPolicy: page(
      "deprecation-policy.md",
      "/developers/deprecation-policy",
      "/developers/deprecation-policy.md",
    ),
    openapi: files["openapi.json"]!,
    llms: files["llms.txt"]!,
    robots: files["robots.txt"]!,
    stylesheet: files["style.css"]!,
    icon: files["favicon.svg"]!,
    apiCatalog: JSON.stringify({
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
          deprecation: [{ href: `${base}/developers/deprecation-policy`, type: "text/html" }],
        },
      ],
    }),
    site,
    renderMarkdown: render,
  };
  return { ok: true, content };
}

function unknownMessage(file: string, names: string[]): string {
  return `static/${file} uses unknown placeholder${names.length === 1 ? "" : "s"} ${
    [...new Set(names)].map((n) => `{{${n}}}`).join(", ")
  }`;
}
