/**
 * What the service publishes: `PUBLIC_BASE_URL`, the product's name and description, the
 * Platform's links, the support address and `CONTENT_SIGNAL`, each checked by the rules of what lands
 * in HTML, Markdown, JSON and shell lines (`rules.ts`).
 *
 * @module
 */

import { CONTROL_CHARACTERS } from "../text/control_characters.ts";
import type { EnvName, Reader } from "./env.ts";
import { redactSecrets } from "./messages.ts";
import { hostProblem, linkProblem, oneLineTextProblem } from "./rules.ts";

/** What the service publishes. */
export interface ProductSettings {
  /** Public base URL, without a trailing slash; every absolute link is built from it. */
  baseUrl: string;
  /** Product name (Platform `name`). */
  name: string;
  /** Product summary (Platform `description`). */
  description: string;
  /** Platform `documentation`. */
  documentationUrl: string;
  /** Platform `developerResources`. */
  developerResourcesUrl: string;
  /** Platform `openapi`. */
  openapiUrl: string;
  /** Platform `agentInstructions`. */
  agentInstructionsUrl: string;
  /** Platform `support`. */
  supportUrl: string;
  /** Address for access requests (customer-data APIs, research server). */
  supportEmail: string;
  /** `CONTENT_SIGNAL`, normalised: the `Content-Signal` of robots.txt and of HTML and Markdown responses. */
  contentSignal: string;
}

/** The keys of the Content Signals Policy (contentsignals.org), in the order the service writes them. */
const CONTENT_SIGNAL_KEYS = ["search", "ai-input", "ai-train"] as const;

/**
 * The default `CONTENT_SIGNAL`: a public discovery directory wants to be found and quoted (search,
 * ai-input), and reserves training (lib/pages/README.md, "Content signals").
 */
const DEFAULT_CONTENT_SIGNAL = "search=yes, ai-input=yes, ai-train=no";

/**
 * `CONTENT_SIGNAL`: each of {@linkcode CONTENT_SIGNAL_KEYS} once, `yes` or `no`, comma-separated in
 * any order; normalised to that order and `, ` so it can go into robots.txt and a header as is.
 */
export function contentSignalOf(raw: string | undefined, errors: string[]): string {
  if (raw === undefined) return DEFAULT_CONTENT_SIGNAL;
  const values = new Map<string, string>();
  for (const entry of raw.split(",")) {
    const match = /^\s*([a-z-]+)\s*=\s*(yes|no)\s*$/.exec(entry);
    const key = match?.[1];
    if (!match || !CONTENT_SIGNAL_KEYS.some((known) => known === key) || values.has(key!)) {
      values.clear();
      break;
    }
    values.set(key!, match[2]!);
  }
  if (values.size !== CONTENT_SIGNAL_KEYS.length) {
    errors.push(
      `CONTENT_SIGNAL must give search, ai-input and ai-train each once as yes or no (e.g. ${DEFAULT_CONTENT_SIGNAL}), got ${
        JSON.stringify(raw.slice(0, 200))
      }`,
    );
    return DEFAULT_CONTENT_SIGNAL;
  }
  return CONTENT_SIGNAL_KEYS.map((key) => `${key}=${values.get(key)}`).join(", ");
}

/** The longest `PRODUCT_NAME`: a name, shown in every page's header and title. */
const MAX_NAME_LENGTH = 100;

/** The longest `PRODUCT_DESCRIPTION`: a paragraph, shown on pages and in the Platform. */
const MAX_DESCRIPTION_LENGTH = 1000;

/** The product's name, description and the Platform's links (defaults under `baseUrl`). */
export function productSettings(
  { read, errors }: Reader,
  baseUrl: string,
  supportEmail: string,
): Omit<ProductSettings, "baseUrl" | "contentSignal"> {
  const link = (name: EnvName, fallback: string) => absoluteUri(read(name), fallback, name, errors);
  const text = (name: EnvName, fallback: string, maxLength: number) => {
    const value = read(name) ?? fallback;
    const problem = oneLineTextProblem(name, value, maxLength);
    if (problem !== undefined) errors.push(problem);
    return value;
  };
  return {
    name: text("PRODUCT_NAME", "Legal Intelligence Platform", MAX_NAME_LENGTH),
    description: text(
      "PRODUCT_DESCRIPTION",
      "Public directory of the legal intelligence platform's documentation, developer resources, OpenAPI description, agent instructions and support.",
      MAX_DESCRIPTION_LENGTH,
    ),
    documentationUrl: link("DOCUMENTATION_URL", `${baseUrl}/`),
    developerResourcesUrl: link("DEVELOPER_RESOURCES_URL", `${baseUrl}/developers`),
    openapiUrl: link("OPENAPI_URL", `${baseUrl}/openapi.json`),
    agentInstructionsUrl: link("AGENT_INSTRUCTIONS_URL", `${baseUrl}/llms.txt`),
    supportUrl: link("SUPPORT_URL", `mailto:${supportEmail}`),
    supportEmail,
  };
}

/** `PUBLIC_BASE_URL`: an http(s) origin and path, without a trailing slash; the local one by default. */
export function baseUrlOf(raw: string | undefined, port: number, errors: string[]): string {
  if (raw === undefined) {
    // Links must name the port callers use; with PORT=0 it is not known when they are built.
    if (port === 0) {
      errors.push("PUBLIC_BASE_URL must be set when PORT is 0: links must name the real port");
    }
    return `http://localhost:${port}`;
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    errors.push(
      `PUBLIC_BASE_URL must be an absolute http(s) URL, got ${JSON.stringify(redactSecrets(raw))}`,
    );
    return raw;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    errors.push(
      `PUBLIC_BASE_URL must use http or https, got ${JSON.stringify(redactSecrets(raw))}`,
    );
    return raw;
  }
  if (url.search !== "" || url.hash !== "" || url.username !== "" || url.password !== "") {
    errors.push(
      `PUBLIC_BASE_URL must not carry credentials, a query or a fragment, got ${
        JSON.stringify(redactSecrets(raw))
      }`,
    );
  }
  if (hostProblem(url)) {
    errors.push(
      `PUBLIC_BASE_URL must name a host by its DNS name or IP address, got ${
        JSON.stringify(redactSecrets(raw))
      }`,
    );
  }
  // The base lands in links, Markdown and the portal's copy-paste shell lines unquoted: its path
  // holds only what none of them gives a meaning (RFC 3986's unreserved characters and /).
  if (!/^[A-Za-z0-9\-._~/]*$/.test(url.pathname) || CONTROL_CHARACTERS.test(raw)) {
    errors.push(
      `PUBLIC_BASE_URL's path may hold only letters, digits, - . _ ~ and /, got ${
        JSON.stringify(redactSecrets(raw))
      }`,
    );
  }
  // Links are built as base + "/path": keep any path prefix, drop the trailing slash.
  return `${url.origin}${url.pathname.replace(/\/+$/, "")}`;
}

/** A link variable, checked by {@linkcode linkProblem}, normalised; `fallback` when unset. */
function absoluteUri(
  raw: string | undefined,
  fallback: string,
  name: string,
  errors: string[],
): string {
  if (raw === undefined) return fallback;
  const problem = linkProblem(name, raw);
  if (problem !== undefined) {
    errors.push(problem);
    return raw;
  }
  return new URL(raw).href;
}
