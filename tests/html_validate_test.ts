/**
 * Every HTML page the service sends, the 404 page included, checked by a real validator:
 * `html-validate` with its `recommended` preset (valid markup, unique non-empty ids, landmarks that
 * screen readers can tell apart). Pages come from the real handler, so what is validated is what a
 * browser receives.
 *
 * @module
 */

import assert from "node:assert/strict";
import { HtmlValidate } from "npm:html-validate@11.18.0";
import { createHandler } from "../lib/handler.ts";
import { MemoryStore } from "../lib/limit/memory/memory_store.ts";
import { testConfig, testContent } from "./_server.ts";

/** Every path answered with HTML by default, and one unknown path for the 404 page. */
const HTML_PATHS = ["/", "/developers", "/api", "/developers/deprecation-policy", "/no-such-page"];

const INFO = { remoteAddr: { transport: "tcp", hostname: "192.0.2.1", port: 1 } } as const;

Deno.test("every HTML page and the 404 page pass html-validate's recommended preset", async () => {
  const config = testConfig({ RATE_LIMIT: "1000" });
  const store = new MemoryStore({ limit: 1000, windowMs: 60_000 }, { sweep: false });
  const handler = createHandler({ config, content: testContent(config), store });
  const validator = new HtmlValidate({ extends: ["html-validate:recommended"] });
  const problems: string[] = [];
  try {
    for (const path of HTML_PATHS) {
      const request = new Request(`http://localhost${path}`, { headers: { accept: "text/html" } });
      const response = await handler(request, INFO);
      assert.equal(response.status, path === "/no-such-page" ? 404 : 200, path);
      assert.equal(response.headers.get("content-type"), "text/html; charset=utf-8", path);
      const report = await validator.validateString(await response.text(), path);
      problems.push(
        ...report.results.flatMap((result) =>
          result.messages.map((m) => `${path}:${m.line}:${m.column} ${m.ruleId}: ${m.message}`)
        ),
      );
    }
  } finally {
    store.close();
  }
  assert.deepEqual(problems, [], "every page is valid HTML");
});
