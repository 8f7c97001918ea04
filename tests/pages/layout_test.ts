/**
 * Tests of the page layout.
 *
 * @module
 */

import assert from "node:assert/strict";
import { escapeHtml, renderPage } from "../../lib/pages/layout.ts";

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
  assert.match(
    html,
    /<a href="https:\/\/d\.example\.com\/developers" aria-current="page">Developers<\/a>/,
  );
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
