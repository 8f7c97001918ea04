/**
 * The rules a value the service publishes keeps, whatever the variable: one line of text without
 * control characters, a link of http, https or mailto whose characters mean nothing in Markdown, HTML
 * or a shell line, an email address, a host name. Each returns why a value breaks it, or undefined.
 *
 * @module
 */

import { parseIp } from "../http/address.ts";
import { CONTROL_CHARACTERS } from "../text/control_characters.ts";
import { redactSecrets } from "./messages.ts";

/** A DNS host name (RFC 1123 labels). */
export const HOST_NAME =
  /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/**
 * Why `value` is not a one-line text the service may show (in HTML, Markdown, JSON and llms.txt,
 * escaped for each), or `undefined`: it may hold no control character or new line and at most
 * `maxLength` characters. Every free-text variable goes through it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(oneLineTextProblem("PRODUCT_NAME", "Acme [Legal]", 100), undefined);
 * assert.match(oneLineTextProblem("PRODUCT_NAME", "Acme\n# Injected", 100)!, /one line/);
 * ```
 */
export function oneLineTextProblem(
  name: string,
  value: string,
  maxLength: number,
): string | undefined {
  if (CONTROL_CHARACTERS.test(value)) {
    return `${name} must be one line of text without control characters (new lines, tabs, escapes, bidirectional controls): remove them from ${
      JSON.stringify(value)
    }`;
  }
  if (value.length > maxLength) {
    return `${name} must be at most ${maxLength} characters, got ${value.length}: shorten it`;
  }
  return undefined;
}

/** Whether an http(s) URL's host is not a DNS name, an IPv4 address or a bracketed IPv6 address. */
export function hostProblem(url: URL): boolean {
  const host = url.hostname;
  if (host.startsWith("[")) return parseIp(host.slice(1, -1)) === undefined;
  return parseIp(host) === undefined && !HOST_NAME.test(host);
}

/**
 * The characters a link may hold once parsed: RFC 3986's unreserved and reserved ones but the
 * quote, parentheses and brackets (which end or open a Markdown link, or a shell word) and `%` as an
 * escape. A link that needs any other character percent-encodes it.
 */
const LINK_CHARACTERS = /^[A-Za-z0-9\-._~:/?#@!$&*+,;=%]*$/;

/**
 * Why `raw` is not a link the service may publish, or `undefined`: an absolute `http`, `https` or
 * `mailto` URI without control characters, whose host is a DNS name or an IP address, of
 * {@linkcode LINK_CHARACTERS} only (an IPv6 host's brackets aside), a `mailto:` naming one valid
 * address. Every link variable goes through it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(linkProblem("SUPPORT_URL", "https://example.com/help?a=1"), undefined);
 * assert.match(linkProblem("SUPPORT_URL", 'mailto:"><script>')!, /SUPPORT_URL/);
 * assert.match(linkProblem("DOCUMENTATION_URL", "javascript:alert(1)")!, /http, https or mailto/);
 * ```
 */
export function linkProblem(name: string, raw: string): string | undefined {
  const shown = JSON.stringify(redactSecrets(raw));
  if (CONTROL_CHARACTERS.test(raw)) {
    return `${name} must be one line without control characters, got ${shown}`;
  }
  const url = URL.parse(raw);
  if (url === null) return `${name} must be an absolute URI, got ${shown}`;
  if (!["http:", "https:", "mailto:"].includes(url.protocol)) {
    return `${name} must be an http, https or mailto URI, got ${shown}`;
  }
  if (url.protocol === "mailto:") {
    const address = decodeURIComponentOr(url.pathname);
    if (url.search !== "" || url.hash !== "" || addressProblem(name, address) !== undefined) {
      return `${name} must be mailto: and one email address (mailto:support@example.com), got ${shown}`;
    }
    return undefined;
  }
  if (hostProblem(url)) {
    return `${name} must name a host by its DNS name or IP address, got ${shown}`;
  }
  const href = url.href.replace(`[${url.hostname.slice(1, -1)}]`, "");
  if (!LINK_CHARACTERS.test(href)) {
    return `${name} may not hold quotes, parentheses, brackets, braces, spaces or \\ ^ | < >: percent-encode them, got ${shown}`;
  }
  return undefined;
}

function decodeURIComponentOr(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/**
 * Why `raw` is not an email address the service may publish, or `undefined`: a local part of
 * letters, digits and single `.`, `_`, `+` or `-` between them, `@`, a DNS name with a dot. (RFC
 * 5322 allows more, quoted strings included; no operator means them, and each would need escaping
 * in Markdown, HTML and `mailto:` links.)
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(addressProblem("SUPPORT_EMAIL", "api.support+x@example.com"), undefined);
 * assert.match(addressProblem("SUPPORT_EMAIL", "sec_[t]*x&y@ex.com")!, /SUPPORT_EMAIL/);
 * ```
 */
export function addressProblem(name: string, raw: string): string | undefined {
  const at = raw.lastIndexOf("@");
  const local = raw.slice(0, at);
  const domain = raw.slice(at + 1);
  if (
    at < 1 || !/^[A-Za-z0-9]+(?:[._+-][A-Za-z0-9]+)*$/.test(local) || local.length > 64 ||
    !HOST_NAME.test(domain) || !domain.includes(".")
  ) {
    return `${name} must be an email address (letters, digits and . _ + - before the @, a domain with a dot after it), got ${
      JSON.stringify(raw)
    }`;
  }
  return undefined;
}
