/**
 * What a misconfigured isolate answers (`lib/workers/misconfigured.ts`), through the Worker's entry
 * with real `Request`s: every response carries what README promises on every response (the five
 * RateLimit fields, `X-Content-Type-Options`, CORS), the Error body on GET, none on HEAD, and a
 * CORS preflight is granted so that the page reads the 500. The same on real workerd is in
 * `worker_config_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { STATIC_DIR, STATIC_FILES } from "../../lib/pages/content.ts";
import { loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import { errorCatalog, errorJson } from "../../lib/errors.ts";
import { createWorker } from "../../lib/workers/worker.ts";

const FILES = Object.fromEntries(
  STATIC_FILES.map((name) => [name, Deno.readTextFileSync(`${STATIC_DIR}/${name}`)]),
);

/** The fields README promises on every response, and what the misconfigured isolate sends. */
const EVERY_RESPONSE = [
  "ratelimit-policy",
  "ratelimit",
  "ratelimit-limit",
  "ratelimit-remaining",
  "ratelimit-reset",
  "x-content-type-options",
  "access-control-allow-origin",
  "access-control-expose-headers",
];

/** A Worker whose isolate refuses `env`; its store is never opened. */
function misconfigured() {
  return createWorker(FILES, () => assert.fail("a misconfigured isolate opens no store"));
}

Deno.test("a misconfigured isolate answers every method 500 internal_error with the RateLimit fields, nosniff and CORS; HEAD without a body", async () => {
  const worker = misconfigured();
  const env = { PUBLIC_BASE_URL: "https://api.example.com/base", RATE_LIMITER: {} };
  for (const method of ["GET", "HEAD", "POST", "OPTIONS"]) {
    for (const path of ["/api/v1/platform", "/", "/no/such/path"]) {
      const label = `${method} ${path}`;
      const response = await worker.fetch(
        new Request(`https://api.example.com${path}`, {
          method,
          headers: { "cf-connecting-ip": "192.0.2.9", origin: "https://page.example" },
        }),
        env,
      );
      assert.equal(response.status, 500, label);
      for (const name of EVERY_RESPONSE) assert.ok(response.headers.has(name), `${label}: ${name}`);
      assert.equal(response.headers.get("ratelimit"), '"default";r=0;t=60', label);
      assert.equal(response.headers.get("ratelimit-policy"), '"default";q=60;w=60', label);
      assert.equal(response.headers.get("access-control-allow-origin"), "*", label);
      assert.match(response.headers.get("access-control-expose-headers")!, /RateLimit-Reset/);
      assert.equal(response.headers.get("retry-after"), null, label);
      assert.equal(response.headers.get("content-type"), "application/json", label);
      assert.equal(response.headers.get("cache-control"), "no-store", label);
      const body = await response.text();
      if (method === "HEAD") {
        assert.equal(body, "", label);
        assert.ok(Number(response.headers.get("content-length")) > 0, label);
      } else {
        const error = JSON.parse(body).error;
        assert.equal(error.code, "internal_error", label);
        assert.ok(!body.includes("/base"), `${label}: no detail of the configuration`);
      }
    }
  }
});

Deno.test("a misconfigured isolate grants a CORS preflight (204, the allow fields and the RateLimit fields), so the page reads the 500", async () => {
  const response = await misconfigured().fetch(
    new Request("https://api.example.com/api/v1/platform", {
      method: "OPTIONS",
      headers: {
        origin: "https://page.example",
        "access-control-request-method": "GET",
        "cf-connecting-ip": "192.0.2.9",
      },
    }),
    { RATE_LIMITER: {} },
  );
  assert.equal(response.status, 204);
  assert.equal(response.headers.get("access-control-allow-methods"), "GET, HEAD, OPTIONS");
  assert.equal(response.headers.get("allow"), "GET, HEAD, OPTIONS");
  for (const name of EVERY_RESPONSE) assert.ok(response.headers.has(name), name);
  assert.equal(await response.text(), "");
});

Deno.test("a misconfigured isolate's fields report RATE_LIMIT and RATE_LIMIT_WINDOW_SECONDS when they are valid, the default when not", async () => {
  const policyOf = async (env: Record<string, unknown>) => {
    const response = await misconfigured().fetch(
      new Request("https://api.example.com/api/v1/platform"),
      env,
    );
    await response.body?.cancel();
    return [response.headers.get("ratelimit-policy"), response.headers.get("ratelimit")];
  };
  // PUBLIC_BASE_URL missing: invalid whatever the rest.
  assert.deepEqual(await policyOf({ RATE_LIMIT: 5, RATE_LIMIT_WINDOW_SECONDS: "30" }), [
    '"default";q=5;w=30',
    '"default";r=0;t=30',
  ]);
  assert.deepEqual(await policyOf({ RATE_LIMIT: "five" }), [
    '"default";q=60;w=60',
    '"default";r=0;t=60',
  ]);
});

Deno.test("a misconfigured isolate's 500 is the catalog's internal_error, as the handler's own, its hint naming SUPPORT_EMAIL when that is valid by itself", async () => {
  const bodyOf = async (env: Record<string, unknown>) => {
    const response = await misconfigured().fetch(
      new Request("https://api.example.com/api/v1/platform"),
      { RATE_LIMITER: {}, ...env },
    );
    return await response.text();
  };
  const expected = (supportEmail?: string) => {
    const loaded = loadConfig(recordEnv(supportEmail ? { SUPPORT_EMAIL: supportEmail } : {}));
    assert.ok(loaded.ok);
    return errorJson("internal_error", errorCatalog(loaded.config).internal_error);
  };
  // PUBLIC_BASE_URL missing: the isolate is misconfigured whatever the rest.
  assert.equal(await bodyOf({ SUPPORT_EMAIL: "api@example.org" }), expected("api@example.org"));
  assert.match(expected("api@example.org"), /contact api@example\.org/);
  assert.equal(await bodyOf({ SUPPORT_EMAIL: "not an address" }), expected());
  assert.equal(await bodyOf({}), expected());
});
