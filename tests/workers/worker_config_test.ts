/**
 * The Worker's configuration comes from its deployment only, on real workerd (`deno task worker`'s
 * `serveWorker`): a request's `Host` never becomes a link of the isolate, `PUBLIC_BASE_URL` unset is
 * an invalid configuration said once with its name (not a 500 a first request can cause), and
 * wrangler.json's vars written as JSON numbers and booleans mean what they say. Vars that cannot
 * work on Workers (a base path, a `TRUSTED_PROXIES` over Cloudflare's addresses) reaching an
 * isolate past the tasks' checks are said once, and every request is answered 500 with the
 * RateLimit fields and CORS; `http://` is warned once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { rawRequest } from "../_server.ts";
import { startWorker } from "./_worker.ts";

const DECODER = new TextDecoder();

/** Paths whose bodies hold the service's absolute links. */
const LINKED = ["/api/v1/platform", "/", "/llms.txt", "/openapi.json"];

/** `GET path` of caller 192.0.2.60 with `host`, its status and body as text. */
async function get(url: string, path: string, host?: string) {
  const response = await rawRequest(url, path, {
    headers: { "cf-connecting-ip": "192.0.2.60", ...(host ? { host } : {}) },
  });
  return { status: response.status, body: DECODER.decode(response.body) };
}

Deno.test("a first request with Host: attacker.example names it in no response, its own or a later one", async () => {
  await using worker = await startWorker({ PUBLIC_BASE_URL: "https://api.example.com" });
  for (const host of ["attacker.example", "attacker.example.", "127.0.0.1"]) {
    for (const path of LINKED) {
      const { status, body } = await get(worker.url, path, host === "127.0.0.1" ? undefined : host);
      assert.equal(status, 200, `${host} ${path}`);
      assert.ok(!body.includes("attacker.example"), `${host} ${path} names attacker.example`);
      if (path === "/api/v1/platform") {
        assert.equal(JSON.parse(body).openapi, "https://api.example.com/openapi.json");
      }
    }
  }
});

Deno.test("without PUBLIC_BASE_URL the isolate refuses its configuration, said once naming PUBLIC_BASE_URL, whatever the first request's Host", async () => {
  const lines: string[] = [];
  await using worker = await startWorker(
    { PUBLIC_BASE_URL: "" },
    false,
    1,
    ({ message }) => lines.push(message),
  );
  for (const host of ["attacker.example", "attacker.example.", undefined]) {
    const { status, body } = await get(worker.url, "/api/v1/platform", host);
    assert.equal(status, 500);
    assert.equal(JSON.parse(body).error.code, "internal_error");
    assert.ok(!body.includes("attacker.example"));
  }
  const said = lines.filter((line) => line.includes("Configuration is invalid"));
  assert.equal(said.length, 1, lines.join("\n"));
  assert.match(said[0]!, /PUBLIC_BASE_URL must be set on Workers/);
  assert.ok(!said[0]!.includes("attacker.example"));
});

Deno.test('wrangler.json\'s vars as JSON values: "RATE_LIMIT": 5 admits 5 of one caller\'s 10, "ACCESS_LOG": false logs nothing, "RATE_LIMIT_STORE": "Memory" is memory', async () => {
  for (const store of [{}, { RATE_LIMIT_STORE: "Memory" }]) {
    const lines: string[] = [];
    await using worker = await startWorker(
      { RATE_LIMIT: 5, ACCESS_LOG: false, RATE_LIMIT_WINDOW_SECONDS: 60, ...store },
      false,
      1,
      ({ message }) => lines.push(message),
    );
    const statuses: number[] = [];
    let policy = "";
    for (let i = 0; i < 10; i++) {
      const response = await rawRequest(worker.url, "/api/v1/platform", {
        headers: { "cf-connecting-ip": "192.0.2.61" },
      });
      statuses.push(response.status);
      policy = response.headers.get("ratelimit-policy") ?? "";
    }
    const label = JSON.stringify(store);
    assert.deepEqual(statuses, [...Array(5).fill(200), ...Array(5).fill(429)], label);
    assert.equal(policy, '"default";q=5;w=60', label);
    // Nothing but, with the memory store, its start-up warning (each isolate counts apart:
    // lib/lifecycle/warnings.ts): no access log.
    const expected = "RATE_LIMIT_STORE" in store ? ["memory_workers"] : [];
    assert.deepEqual(lines.map((line) => JSON.parse(line).warning), expected, `${label}: ${lines}`);
  }
});

Deno.test('RATE_LIMIT_STORE is compared as loadConfig compares it: "Memory" is the memory store, which takes a limit the Durable Object cannot', async () => {
  await using worker = await startWorker({ RATE_LIMIT_STORE: "Memory", RATE_LIMIT: 20_000 });
  const response = await rawRequest(worker.url, "/api/v1/platform", {
    headers: { "cf-connecting-ip": "192.0.2.62" },
  });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("ratelimit-policy"), '"default";q=20000;w=60');
});

Deno.test("an isolate given vars that cannot work (a PUBLIC_BASE_URL with a path, set past the task in the dashboard) answers 500 with the RateLimit fields and CORS, and says why once naming the variable", async () => {
  const lines: string[] = [];
  await using worker = await startWorker(
    { PUBLIC_BASE_URL: "https://api.example.com/base", TRUSTED_PROXIES: "2a06:98c0::/29" },
    false,
    1,
    ({ message }) => lines.push(message),
  );
  for (const path of ["/api/v1/platform", "/base/api/v1/platform"]) {
    const response = await rawRequest(worker.url, path, {
      headers: { "cf-connecting-ip": "192.0.2.63", origin: "https://page.example" },
    });
    assert.equal(response.status, 500, path);
    assert.equal(JSON.parse(DECODER.decode(response.body)).error.code, "internal_error", path);
    assert.equal(response.headers.get("ratelimit"), '"default";r=0;t=60', path);
    assert.equal(response.headers.get("ratelimit-policy"), '"default";q=60;w=60', path);
    assert.equal(response.headers.get("ratelimit-limit"), "60", path);
    assert.equal(response.headers.get("ratelimit-remaining"), "0", path);
    assert.equal(response.headers.get("ratelimit-reset"), "60", path);
    assert.equal(response.headers.get("access-control-allow-origin"), "*", path);
    assert.match(response.headers.get("access-control-expose-headers") ?? "", /RateLimit/);
    assert.equal(response.headers.get("x-content-type-options"), "nosniff", path);
  }
  const said = lines.filter((line) => line.includes("Configuration is invalid"));
  assert.equal(said.length, 1, lines.join("\n"));
  assert.match(said[0]!, /PUBLIC_BASE_URL must be an origin on Workers/);
  assert.match(said[0]!, /TRUSTED_PROXIES must not cover Cloudflare's own addresses/);
});

Deno.test("an isolate with PUBLIC_BASE_URL over http:// serves, and warns once naming PUBLIC_BASE_URL", async () => {
  const lines: string[] = [];
  await using worker = await startWorker(
    { PUBLIC_BASE_URL: "http://api.example.com" },
    false,
    1,
    ({ message }) => lines.push(message),
  );
  for (let i = 0; i < 3; i++) assert.equal((await get(worker.url, "/api/v1/platform")).status, 200);
  const warned = lines.filter((line) => line.includes("plain HTTP"));
  assert.equal(warned.length, 1, lines.join("\n"));
  assert.match(JSON.parse(warned[0]!).message, /^PUBLIC_BASE_URL is "http:\/\/api\.example\.com"/);
});
