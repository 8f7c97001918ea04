/**
 * Cross-origin use from a real browser: headless Chromium (Debian's `chromium` at `/usr/bin/chromium`,
 * driven by `npm:playwright-core`) loads a page from a second local origin whose script calls the
 * service with `fetch`, as a browser app on another site would: a simple GET, a preflighted GET
 * (`If-None-Match`), the same to an unknown path (the JSON 404 must reach the page), a Markdown GET
 * as an agent in a browser sends it, and the RateLimit fields, `x-markdown-tokens` and
 * `Content-Signal` read from JavaScript (`Access-Control-Expose-Headers`).
 *
 * The service's own pages keep their strict CSP and run no JavaScript; the script here belongs to
 * the test's own page, served by the test on the other origin. Without the browser the test is
 * skipped outside CI and fails in CI (`CI=true`).
 *
 * @module
 */
/// <reference lib="dom" />
/// <reference lib="deno.ns" />

import assert from "node:assert/strict";
import { CHROMIUM, LAUNCH_ARGS, skipBrowserTests } from "./_chromium.ts";
import { type Browser, chromium } from "npm:playwright-core@1.65.1";
import { createHandler } from "../lib/handler.ts";
import { MemoryStore } from "../lib/limit/memory/memory_store.ts";
import { testConfig, testContent } from "./_server.ts";

const LIMIT = 60;

/**
 * The app's script: each case is one `fetch` from the app's origin to the service, reporting what the
 * page could read, or the error the browser gave it instead.
 */
const APP_SCRIPT = `
const read = (response, body) => ({
  status: response.status,
  body,
  rateLimit: response.headers.get("RateLimit"),
  remaining: response.headers.get("RateLimit-Remaining"),
  policy: response.headers.get("RateLimit-Policy"),
  etag: response.headers.get("ETag"),
  link: response.headers.get("Link"),
  tokens: response.headers.get("x-markdown-tokens"),
  signal: response.headers.get("Content-Signal"),
});
const attempt = async (url, init) => {
  try {
    const response = await fetch(url, init);
    const text = await response.text();
    const json = (response.headers.get("Content-Type") ?? "").startsWith("application/json");
    return read(response, text === "" ? null : json ? JSON.parse(text) : text);
  } catch (error) {
    return { error: String(error) };
  }
};
window.runCases = async (service) => {
  const simple = await attempt(service + "/api/v1/platform");
  const revalidated = await attempt(service + "/api/v1/platform", {
    headers: { "If-None-Match": simple.etag ?? '"none"' },
  });
  const unknown = await attempt(service + "/api/v2/platform", {
    headers: { "If-None-Match": '"x"' },
  });
  // Accept is CORS-safelisted: an agent's Markdown request needs no preflight either.
  const markdown = await attempt(service + "/api/v1/platform", {
    headers: { Accept: "text/markdown" },
  });
  return { simple, revalidated, unknown, markdown };
};
`;

const APP_PAGE = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Another origin</title>
<script src="/app.js"></script></head><body><p>A browser app on another origin.</p></body></html>
`;

const skipped = skipBrowserTests("cross-origin browser test");

/** What the page read from one response. */
interface Seen {
  status?: number;
  body?: unknown;
  rateLimit?: string | null;
  remaining?: string | null;
  policy?: string | null;
  etag?: string | null;
  link?: string | null;
  tokens?: string | null;
  signal?: string | null;
  error?: string;
}

Deno.test({
  name:
    "a page on another origin reads the service's answers, its 404 and its RateLimit fields in Chromium",
  ignore: skipped,
  // Playwright keeps a child process and pipes of its own until browser.close() in `finally`.
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const config = testConfig({ RATE_LIMIT: String(LIMIT) });
    const store = new MemoryStore({ limit: LIMIT, windowMs: 60_000 });
    const handler = createHandler({ config, content: testContent(config), store });
    const received: string[] = [];
    const service = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (r, i) => {
      received.push(`${r.method} ${new URL(r.url).pathname}`);
      return handler(r, i);
    });
    const app = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (r) => {
      const path = new URL(r.url).pathname;
      if (path === "/app.js") {
        return new Response(APP_SCRIPT, { headers: { "content-type": "text/javascript" } });
      }
      return new Response(APP_PAGE, { headers: { "content-type": "text/html; charset=utf-8" } });
    });
    const serviceOrigin = `http://127.0.0.1:${service.addr.port}`;
    const appOrigin = `http://127.0.0.1:${app.addr.port}`;
    let browser: Browser | undefined;
    try {
      browser = await chromium.launch({ executablePath: CHROMIUM, args: [...LAUNCH_ARGS] });
      const page = await browser.newPage();
      const consoleErrors: string[] = [];
      page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
      await page.goto(`${appOrigin}/`);
      const seen = await page.evaluate(
        (origin) =>
          (globalThis as unknown as {
            runCases: (s: string) => Promise<Record<string, Seen>>;
          }).runCases(origin),
        serviceOrigin,
      ) as Record<"simple" | "revalidated" | "unknown" | "markdown", Seen>;

      // A simple GET: no preflight; the body and every exposed field are readable.
      assert.equal(seen.simple.error, undefined, `simple GET: ${seen.simple.error}`);
      assert.equal(seen.simple.status, 200);
      assert.equal((seen.simple.body as { name: string }).name, config.name);
      assert.equal(seen.simple.policy, `"default";q=${LIMIT};w=60`);
      assert.equal(seen.simple.remaining, String(LIMIT - 1));
      assert.match(seen.simple.rateLimit ?? "", new RegExp(`^"default";r=${LIMIT - 1};t=\\d+$`));
      assert.match(seen.simple.link ?? "", /rel="deprecation"/);

      // If-None-Match is not CORS-safelisted: the browser preflights, then revalidates (304).
      assert.equal(seen.revalidated.error, undefined, `preflighted GET: ${seen.revalidated.error}`);
      assert.equal(seen.revalidated.status, 304);
      assert.equal(seen.revalidated.remaining, String(LIMIT - 2), "the preflight was not counted");

      // The same to an unknown path: the preflight is granted, and the page reads the JSON 404.
      assert.equal(seen.unknown.error, undefined, `unknown path: ${seen.unknown.error}`);
      assert.equal(seen.unknown.status, 404);
      assert.equal((seen.unknown.body as { error: { code: string } }).error.code, "not_found");
      assert.equal(seen.unknown.remaining, String(LIMIT - 3));

      // An agent in a browser asking for Markdown reads its size in tokens and the content signal.
      assert.equal(seen.markdown.error, undefined, `Markdown GET: ${seen.markdown.error}`);
      assert.equal(seen.markdown.status, 200);
      assert.match(String(seen.markdown.body), /^# /m);
      assert.match(seen.markdown.tokens ?? "", /^[1-9]\d*$/, "x-markdown-tokens is exposed");
      assert.equal(seen.markdown.signal, config.contentSignal, "Content-Signal is exposed");
      assert.equal(seen.markdown.remaining, String(LIMIT - 4));

      assert.ok(received.includes("OPTIONS /api/v1/platform"), "Chromium preflighted the GET");
      assert.ok(received.includes("OPTIONS /api/v2/platform"), "and the unknown path");
      assert.equal(
        received.filter((line) => line === "OPTIONS /api/v1/platform").length,
        1,
        "only the revalidation was preflighted, not the Markdown GET",
      );
      assert.deepEqual(consoleErrors.filter((e) => /CORS|access control/i.test(e)), []);
    } finally {
      await browser?.close();
      await app.shutdown();
      await service.shutdown();
      store.close();
    }
  },
});
