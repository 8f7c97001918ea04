/**
 * Tests of the page layout.
 *
 * @module
 */

import assert from "node:assert/strict";
import { escapeHtml, pageLinksOnHost, renderPage } from "../../lib/pages/layout.ts";

const SITE = {
  name: "Acme & Co",
  baseUrl: "https://d.example.com",
  supportUrl: "mailto:help@example.com",
};

Deno.test("renderPage() escapes metadata and marks the current page", () => {
  const html = renderPage("<p>body</p>", {
    path: "/developers",
    title: 'Dev "portal" <x>',
    description: "Say <hi>",
    markdownUrl: "https://d.example.com/developers",
  }, SITE);
  assert.match(html, /^<!DOCTYPE html>\n<html lang="en">/);
  assert.match(html, /<title>Dev &quot;portal&quot; &lt;x&gt;<\/title>/);
  assert.match(html, /<meta name="description" content="Say &lt;hi&gt;">/);
  assert.match(
    html,
    /<link rel="alternate" type="text\/markdown" href="https:\/\/d\.example\.com\/developers">/,
  );
  assert.match(
    html,
    /<link rel="service-desc" [^>]*href="https:\/\/d\.example\.com\/openapi\.json">/,
  );
  assert.match(html, /<a href="\/developers" aria-current="page">Developers<\/a>/);
  assert.match(html, /Acme &amp; Co/);
  assert.match(html, /<main id=\"main\"><div class=\"wrap\">\n<p>body<\/p>\n<\/div><\/main>/);
  assert.doesNotMatch(html, /<script|style=/);
});

Deno.test("escapeHtml() escapes the five characters that matter", () => {
  assert.equal(
    escapeHtml(`<a href="x" title='y'>&</a>`),
    "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;",
  );
});

Deno.test("renderPage() links its stylesheet, icon and portal pages by path, its canonical and agent links by the base URL", () => {
  const site = { ...SITE, baseUrl: "https://d.example.com/discovery" };
  const html = renderPage(
    '<p><a href="https://d.example.com/discovery/developers/deprecation-policy">p</a></p>',
    { path: "/developers", title: "T", description: "D" },
    site,
  );
  assert.ok(html.includes('<link rel="stylesheet" href="/discovery/style.css">'));
  assert.ok(html.includes('<link rel="icon" type="image/svg+xml" href="/discovery/favicon.svg">'));
  assert.ok(html.includes('<a class="brand" href="/discovery/">'));
  assert.ok(html.includes('<a href="/discovery/developers" aria-current="page">Developers</a>'));
  assert.ok(html.includes('<p><a href="/discovery/developers/deprecation-policy">p</a></p>'));
  assert.ok(
    html.includes('<link rel="canonical" href="https://d.example.com/discovery/developers">'),
  );
  assert.ok(html.includes('href="https://d.example.com/discovery/openapi.json"'));
  assert.ok(html.includes('href="https://d.example.com/discovery/llms.txt"'));
  // Besides the canonical link, nothing names the base URL for a page or an asset.
  assert.doesNotMatch(
    html.replace(/<link rel="canonical"[^>]*>/, ""),
    /href="https:\/\/d\.example\.com\/discovery\/(?:style|favicon|developers")/,
  );
});

Deno.test("pageLinksOnHost() turns links to the portal's pages path-absolute, and only those", () => {
  const base = "https://d.example.com";
  const cases: Array<[string, string]> = [
    [`<a href="${base}/">h</a>`, '<a href="/">h</a>'],
    [`<a href="${base}">h</a>`, '<a href="/">h</a>'],
    [`<a href="${base}/developers">d</a>`, '<a href="/developers">d</a>'],
    [`<a href="${base}/developers#caching">d</a>`, '<a href="/developers#caching">d</a>'],
    [
      `<a href="${base}/developers/deprecation-policy">${base}/developers/deprecation-policy</a>`,
      `<a href="/developers/deprecation-policy">${base}/developers/deprecation-policy</a>`,
    ],
    // Not a portal page, or not this base: unchanged.
    [`<a href="${base}/developers/deprecation-policy.md">m</a>`, ""],
    [`<a href="${base}/openapi.json">o</a>`, ""],
    [`<a href="${base}/developersx">x</a>`, ""],
    [`<a href="${base}.evil.example/developers">x</a>`, ""],
    [`<a href="https://other.example/developers">x</a>`, ""],
    [`<code>${base}/developers</code>`, ""],
  ];
  for (const [input, expected] of cases) {
    assert.equal(pageLinksOnHost(input, base), expected || input, input);
  }
});
