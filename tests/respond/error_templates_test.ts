/**
 * Tests of the error renderer: each code in each media type, the fields every error carries, and the
 * GET and HEAD templates of one error.
 *
 * @module
 */

import assert from "node:assert/strict";
import { ERROR_CODES } from "../../lib/errors.ts";
import {
  createErrorRenderer,
  errorTemplates,
  forMethod,
} from "../../lib/respond/error_templates.ts";
import { testConfig, testContent } from "../_server.ts";

function renderer() {
  const config = testConfig();
  return createErrorRenderer(config, testContent(config).site);
}

Deno.test("every error code renders in JSON as the Error shape with its status", () => {
  const render = renderer();
  for (const code of ERROR_CODES) {
    const error = render(code, "json");
    const body = JSON.parse(new TextDecoder().decode(error.body));
    assert.equal(body.error.code, code);
    assert.ok(error.status >= 400, code);
    assert.deepEqual(error.fields.slice(0, 2), [
      ["content-type", "application/json"],
      ["cache-control", "no-store"],
    ]);
  }
});

Deno.test("only the 405 names the allowed methods; only HTML carries the content security policy", () => {
  const render = renderer();
  const allow = (code: "method_not_allowed" | "not_found") =>
    render(code, "json").fields.find(([name]) => name === "allow")?.[1];
  assert.equal(allow("method_not_allowed"), "GET, HEAD, OPTIONS");
  assert.equal(allow("not_found"), undefined);
  const csp = (type: "html" | "markdown") =>
    render("not_found", type).fields.some(([name]) => name === "content-security-policy");
  assert.equal(csp("html"), true);
  assert.equal(csp("markdown"), false);
});

Deno.test("errorTemplates() adds the path's fields; HEAD has no body and the GET body's length", () => {
  const error = renderer()("not_found", "markdown");
  const pair = errorTemplates(error, [["link", "<x>"]]);
  assert.equal(typeof pair.get.body, "string");
  assert.deepEqual(pair.get.fields.at(-1), ["link", "<x>"]);
  assert.equal(pair.head.body, null);
  assert.deepEqual(pair.head.fields.at(-1), ["content-length", String(error.body.length)]);
  assert.equal(forMethod(pair, "HEAD"), pair.head);
  assert.equal(forMethod(pair, "PUT"), pair.get);
});
