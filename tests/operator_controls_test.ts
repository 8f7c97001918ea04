/**
 * The operator's controls on the handler (lib/limit/caller/caller_controls.ts): `RATE_LIMIT_EXEMPT`
 * callers are counted and never refused, `RATE_LIMIT_MODE=report` serves every would-be refusal,
 * `RATE_LIMIT_DENY` answers 403 before any store call; each with the RateLimit fields as counted.
 * Real `Request`s, a manual clock, an in-memory access log. The same controls through a real process
 * and the Worker on workerd: tests/start_test.ts and tests/workers/worker_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { AccessRecord } from "../lib/access_log.ts";
import { loadConfig } from "../lib/config/config.ts";
import { recordEnv } from "../lib/config/env.ts";
import { createHandler, type Handler } from "../lib/handler.ts";
import { policyOf, type RateLimitStore } from "../lib/limit/core/decision.ts";
import { MemoryStore } from "../lib/limit/memory/memory_store.ts";
import {
  type EnvRecord,
  manualClock,
  RATE_LIMIT_FIELDS,
  testConfig,
  testContent,
} from "./_server.ts";

/** A handler over a memory store (or `store`), with its access log. */
function setup(env: EnvRecord, store?: RateLimitStore) {
  const config = testConfig({ RATE_LIMIT: "60", ...env });
  const clock = manualClock();
  const memory = new MemoryStore(policyOf(config), { now: clock.now, sweep: false });
  const records: AccessRecord[] = [];
  const handler = createHandler({
    config,
    content: testContent(config),
    store: store ?? memory,
    now: clock.now,
    accessLog: (record) => records.push(record),
  });
  return { handler, records, clock };
}

/** Sends `count` GETs of `path` from `peer` (with `headers`) and returns their responses, bodies read. */
async function sendMany(
  handler: Handler,
  count: number,
  peer: string,
  options: { path?: string; method?: string; headers?: Record<string, string> } = {},
): Promise<Response[]> {
  const responses: Response[] = [];
  for (let i = 0; i < count; i++) {
    const request = new Request(`http://localhost${options.path ?? "/api/v1/platform"}`, {
      method: options.method ?? "GET",
      headers: options.headers ?? {},
    });
    const response = await handler(request, { remoteAddr: { hostname: peer } });
    await response.body?.cancel();
    responses.push(response);
  }
  return responses;
}

const statuses = (responses: Response[]) => responses.map((response) => response.status);
const header = (name: string) => (response: Response) => response.headers.get(name);

Deno.test("an exempt address gets 200 of 200 at limit 60, its fields counting down to r=0; a caller beside it gets 60 of 100", async () => {
  const { handler, records } = setup({ RATE_LIMIT_EXEMPT: "192.0.2.0/28, 2001:db8::/48" });
  const exempt = await sendMany(handler, 200, "192.0.2.7");
  const other = await sendMany(handler, 100, "198.51.100.1");
  assert.equal(exempt.filter((response) => response.status === 200).length, 200);
  assert.deepEqual(
    exempt.map(header("ratelimit-remaining")),
    Array.from({ length: 200 }, (_, i) => String(Math.max(0, 59 - i))),
  );
  assert.equal(exempt[199]!.headers.get("ratelimit"), '"default";r=0;t=60');
  assert.ok(exempt.every((response) => !response.headers.has("retry-after")));
  assert.ok(exempt.every((response) => RATE_LIMIT_FIELDS.every((f) => response.headers.has(f))));
  assert.equal(other.filter((response) => response.status === 200).length, 60);
  assert.equal(other[99]!.status, 429);
  assert.equal(other[99]!.headers.get("retry-after"), "60");
  // The access log says which answers were would-be refusals: 140 of the exempt caller's.
  const exempted = records.filter((record) => record.ratelimit === "exempted");
  assert.equal(exempted.length, 140);
  assert.ok(exempted.every((record) => record.caller === "192.0.2.0" && record.status === 200));
  assert.equal(records.filter((record) => record.ratelimit !== undefined).length, 140);
  // An IPv6 caller in the /48 (its /64 is the key), and an IPv4-mapped spelling of the IPv4 one.
  assert.ok(statuses(await sendMany(handler, 70, "2001:db8:0:5::9")).every((s) => s === 200));
  assert.ok(statuses(await sendMany(handler, 5, "::ffff:192.0.2.7")).every((s) => s === 200));
});

Deno.test("behind a trusted proxy, the exempt client the proxy names is exempt; the same address in X-Forwarded-For from an untrusted peer is not", async () => {
  const { handler } = setup({ TRUSTED_PROXIES: "10.0.0.1", RATE_LIMIT_EXEMPT: "192.0.2.7" });
  const forwarded = { headers: { "x-forwarded-for": "192.0.2.7" } };
  assert.ok(statuses(await sendMany(handler, 70, "10.0.0.1", forwarded)).every((s) => s === 200));
  const spoofed = statuses(await sendMany(handler, 70, "203.0.113.9", forwarded));
  assert.equal(spoofed.filter((status) => status === 200).length, 60);
  assert.equal(spoofed.at(-1), 429);
});

Deno.test("RATE_LIMIT_MODE=report at limit 60: 100 requests all 200, the last 40 with r=0 and no Retry-After, logged as report_refused", async () => {
  const { handler, records } = setup({ RATE_LIMIT_MODE: "report" });
  const responses = await sendMany(handler, 100, "192.0.2.1");
  assert.deepEqual(new Set(statuses(responses)), new Set([200]));
  const last = responses.slice(60);
  assert.ok(last.every((response) => response.headers.get("ratelimit-remaining") === "0"));
  assert.ok(last.every((response) => response.headers.get("ratelimit") === '"default";r=0;t=60'));
  assert.ok(responses.every((response) => !response.headers.has("retry-after")));
  assert.equal(responses[59]!.headers.get("ratelimit-remaining"), "0");
  const reported = records.filter((record) => record.ratelimit === "report_refused");
  assert.equal(reported.length, 40);
  assert.deepEqual(records.slice(60), reported);
});

Deno.test("report mode serves the closed policy's rate_limit_unavailable too", async () => {
  const unavailable = {
    hit: () => ({ allowed: false, remaining: 0, resetSeconds: 1, unavailable: true as const }),
    peek: () => ({ allowed: true, remaining: 60, resetSeconds: 60 }),
    close() {},
  };
  const { handler, records } = setup({ RATE_LIMIT_MODE: "report" }, unavailable);
  const [response] = await sendMany(handler, 1, "192.0.2.1");
  assert.equal(response!.status, 200);
  assert.equal(response!.headers.get("ratelimit"), '"default";r=0;t=1');
  assert.equal(response!.headers.has("retry-after"), false);
  assert.equal(records[0]!.ratelimit, "report_refused");
  const enforced = setup({}, unavailable);
  assert.equal((await sendMany(enforced.handler, 1, "192.0.2.1"))[0]!.status, 429);
});

Deno.test("a denied address gets 403 forbidden on every path and method, with the fields, and the store is never called", async () => {
  let calls = 0;
  const down: RateLimitStore = {
    hit: () => (calls++, Promise.reject(new Error("store down"))),
    peek: () => (calls++, Promise.reject(new Error("store down"))),
    close() {},
  };
  // Deny wins over exempt.
  const { handler, records } = setup(
    { RATE_LIMIT_DENY: "192.0.2.66, 2001:db8:bad::/48", RATE_LIMIT_EXEMPT: "192.0.2.0/24" },
    down,
  );
  const preflight = {
    method: "OPTIONS",
    headers: { origin: "https://example.com", "access-control-request-method": "GET" },
  };
  const tries: Array<RequestInit & { path: string }> = [
    ...["/api/v1/platform", "/", "/style.css", "/nowhere", "/openapi.json"].map((path) => ({
      path,
    })),
    { path: "/api/v1/platform", method: "HEAD" },
    { path: "/api/v1/platform", method: "POST" },
    { path: "/api/v1/platform", ...preflight },
  ];
  for (const peer of ["192.0.2.66", "2001:db8:bad:1::1"]) {
    for (const options of tries) {
      const request = new Request(`http://localhost${options.path}`, options);
      const response = await handler(request, { remoteAddr: { hostname: peer } });
      const what = `${options.method ?? "GET"} ${options.path} from ${peer}`;
      assert.equal(response.status, 403, what);
      assert.equal(response.headers.get("content-type"), "application/json", what);
      assert.equal(response.headers.get("ratelimit"), '"default";r=0;t=60', what);
      assert.ok(RATE_LIMIT_FIELDS.every((f) => response.headers.has(f)), what);
      assert.equal(response.headers.has("retry-after"), false, what);
      if (options.method !== "HEAD") {
        const body = await response.json();
        assert.equal(body.error.code, "forbidden", what);
        assert.deepEqual(Object.keys(body.error), ["code", "message", "hint"]);
      }
    }
  }
  assert.equal(calls, 0, "the store is never called for a denied caller");
  assert.ok(records.every((record) => record.ratelimit === "denied" && record.status === 403));
});

Deno.test("a CORS preflight of a fresh caller reports t = the window, never t=0", async () => {
  const { handler } = setup({ RATE_LIMIT_WINDOW_SECONDS: "90" });
  const [response] = await sendMany(handler, 1, "192.0.2.1", {
    method: "OPTIONS",
    headers: { origin: "https://example.com", "access-control-request-method": "GET" },
  });
  assert.equal(response!.status, 204);
  assert.equal(response!.headers.get("ratelimit"), '"default";r=60;t=90');
  assert.equal(response!.headers.get("ratelimit-reset"), "90");
});

Deno.test("each list is refused at start-up in one sentence naming it: a prefix narrower than /64, an overlap with TRUSTED_PROXIES, unix, junk", () => {
  const problems = (env: EnvRecord) => {
    const loaded = loadConfig(recordEnv(env));
    assert.equal(loaded.ok, false, JSON.stringify(env));
    return loaded.ok ? [] : loaded.errors;
  };
  const narrow = problems({ RATE_LIMIT_EXEMPT: "2001:db8::1/128" });
  assert.equal(narrow.length, 1);
  assert.match(
    narrow[0]!,
    /^RATE_LIMIT_EXEMPT may not list 2001:db8::1\/128: IPv6 callers are counted by their \/64 .*write 2001:db8::\/64/,
  );
  assert.equal(narrow[0]!.split(". ").length, 1, "one sentence");
  assert.match(problems({ RATE_LIMIT_DENY: "2001:db8::1" })[0]!, /^RATE_LIMIT_DENY .*\/64/);
  const overlap = problems({ TRUSTED_PROXIES: "10.0.0.1", RATE_LIMIT_EXEMPT: "10.0.0.0/8" });
  assert.equal(overlap.length, 1);
  assert.match(
    overlap[0]!,
    /^RATE_LIMIT_EXEMPT may not name a trusted proxy \(10\.0\.0\.0\/8 overlaps TRUSTED_PROXIES' 10\.0\.0\.1\/32\)/,
  );
  assert.match(
    problems({ TRUSTED_PROXIES: "::1", RATE_LIMIT_DENY: "::/64" })[0]!,
    /TRUSTED_PROXIES/,
  );
  assert.match(problems({ RATE_LIMIT_EXEMPT: "unix" })[0]!, /^RATE_LIMIT_EXEMPT may not list unix/);
  assert.match(
    problems({ RATE_LIMIT_EXEMPT: "192.0.2.1, monitor" })[0]!,
    /^RATE_LIMIT_EXEMPT .*"monitor"/,
  );
  assert.match(
    problems({ RATE_LIMIT_MODE: "shadow" })[0]!,
    /^RATE_LIMIT_MODE must be enforce or report/,
  );
  const ok = loadConfig(
    recordEnv({
      RATE_LIMIT_EXEMPT: "2001:db8::/64, ::ffff:192.0.2.0/120",
      RATE_LIMIT_DENY: "198.51.100.0/24",
    }),
  );
  assert.ok(ok.ok);
  assert.equal(ok.config.rateLimitMode, "enforce");
});
