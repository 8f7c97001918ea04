/**
 * Tests of the error catalogue and bodies.
 *
 * @module
 */

import assert from "node:assert/strict";
import { loadConfig } from "../lib/config/config.ts";
import { recordEnv } from "../lib/config/env.ts";
import {
  ERROR_CODES,
  errorCatalog,
  errorHtmlContent,
  errorJson,
  errorMarkdown,
} from "../lib/errors.ts";

const result = loadConfig(recordEnv({ RATE_LIMIT: "10", RATE_LIMIT_WINDOW_SECONDS: "30" }));
if (!result.ok) throw new Error(result.errors.join("\n"));
const catalog = errorCatalog(result.config);

Deno.test("every error code has a status and non-empty message and hint", () => {
  const statuses = Object.fromEntries(ERROR_CODES.map((code) => [code, catalog[code].status]));
  assert.deepEqual(statuses, {
    bad_request: 400,
    forbidden: 403,
    not_found: 404,
    method_not_allowed: 405,
    request_timeout: 408,
    rate_limited: 429,
    rate_limit_unavailable: 429,
    internal_error: 500,
    not_implemented: 501,
  });
  for (const code of ERROR_CODES) {
    assert.ok(catalog[code].message.length > 0 && catalog[code].hint.length > 0, code);
  }
  assert.match(catalog.rate_limited.message, /10 requests per 30 seconds/);
});

Deno.test("errorJson() has exactly the Error shape", () => {
  const body = JSON.parse(errorJson("not_found", catalog.not_found));
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.deepEqual(Object.keys(body.error), ["code", "message", "hint"]);
  assert.equal(body.error.code, "not_found");
});

Deno.test("errorMarkdown() and errorHtmlContent() carry the code, message and hint", () => {
  const markdown = errorMarkdown("method_not_allowed", catalog.method_not_allowed);
  assert.match(markdown, /^# 405 Method not allowed\n/);
  assert.match(markdown, /`method_not_allowed`/);
  assert.ok(markdown.includes(catalog.method_not_allowed.hint));
  const html = errorHtmlContent("not_found", catalog.not_found);
  assert.match(html, /<h1>404 Not found<\/h1>/);
  assert.match(html, /<code>not_found<\/code>/);
});
