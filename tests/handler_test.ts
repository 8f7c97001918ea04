/**
 * Handler logic with real `Request`s, a stub peer address and an injected clock (no server, no
 * sleeping): the sliding-window limiter across paths and statuses, caller keys (IPv4-mapped IPv6,
 * IPv6 /64, trusted proxies), the 500 answered at the edge, and what the access log keeps.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { AccessRecord } from "../lib/access_log.ts";
import { createHandler, type Handler } from "../lib/handler.ts";
import { MemoryStore } from "../lib/limit/memory/memory_store.ts";
import { MAX_FORWARDED_HOPS, MAX_FORWARDED_LENGTH } from "../lib/http/forwarded.ts";
import { MAX_HOST_LENGTH, MAX_IF_NONE_MATCH_LENGTH } from "../lib/http/message.ts";
import { MAX_NEGOTIATED_LENGTH, memoize, preferredEncoding } from "../lib/http/negotiate.ts";
import { type Decision, policyOf, type RateLimitStore } from "../lib/limit/core/decision.ts";
import { createContract, type OpenApiDocument } from "./_contract.ts";
import { lazyGlobalsReadBy } from "./_lazy_globals.ts";
import {
  type EnvRecord,
  type ManualClock,
  manualClock,
  preparedPaths,
  testConfig,
  testContent,
} from "./_server.ts";

interface Setup {
  handler: Handler;
  clock: ManualClock;
  records: AccessRecord[];
  errors: unknown[];
  openapi: string;
  close: () => void;
}

/** Builds the handler as `main.ts` does, with a manual clock and an in-memory access log. */
function setup(env: EnvRecord = {}, store?: RateLimitStore): Setup {
  const config = testConfig(env);
  const content = testContent(config);
  const clock = manualClock();
  const memory = new MemoryStore(
    policyOf(config),
    { now: clock.now, sweep: false },
  );
  const records: AccessRecord[] = [];
  const errors: unknown[] = [];
  const handler = createHandler({
    config,
    content,
    store: store ?? memory,
    now: clock.now,
    accessLog: (record) => records.push(record),
    onError: (error) => errors.push(error),
  });
  return { handler, clock, records, errors, openapi: content.openapi, close: () => memory.close() };
}

interface SendOptions {
  method?: string;
  headers?: Record<string, string>;
  peer?: string;
}

/** Sends one request from `peer` (default 192.0.2.1) and reads the body. */
async function send(
  handler: Handler,
  path: string,
  options: SendOptions = {},
): Promise<{ response: Response; text: string }> {
  const request = new Request(`http://localhost${path}`, {
    method: options.method ?? "GET",
    headers: options.headers ?? {},
  });
  const info = {
    remoteAddr: { transport: "tcp" as const, hostname: options.peer ?? "192.0.2.1", port: 1 },
  };
  const response = await handler(request, info);
  const text = await response.text();
  return { response, text };
}

function rateOf(response: Response) {
  return {
    status: response.status,
    remaining: Number(response.headers.get("ratelimit-remaining")),
    reset: Number(response.headers.get("ratelimit-reset")),
    retryAfter: response.headers.get("retry-after"),
  };
}

const PREFLIGHT = { origin: "https://app.example.org", "access-control-request-method": "GET" };

// ---------------------------------------------------------------------------------------------------
// The limiter

Deno.test("the limit is shared across paths: 200s, 404s and 405s all count", async () => {
  const { handler, close } = setup();
  try {
    const requests: Array<[string, SendOptions, number]> = [
      ["/api/v1/platform", {}, 200],
      ["/does/not/exist", {}, 404],
      ["/developers", { method: "DELETE" }, 405],
      ["/llms.txt", { method: "HEAD" }, 200],
      ["/nope", { method: "POST" }, 404],
      ["/", { method: "OPTIONS" }, 204],
    ];
    for (let i = 0; i < 60; i++) {
      const [path, options, status] = requests[i % requests.length]!;
      const { response } = await send(handler, path, options);
      assert.equal(response.status, status, `request ${i + 1}: ${path}`);
      assert.equal(rateOf(response).remaining, 59 - i, `request ${i + 1}`);
    }
    for (const [path, options] of requests) {
      const { response } = await send(handler, path, options);
      assert.equal(response.status, 429, `${options.method ?? "GET"} ${path} after 60`);
    }
  } finally {
    close();
  }
});

Deno.test("limit() rejects the 61st request in a window until the oldest request leaves it", async () => {
  const { handler, clock, close } = setup();
  try {
    const start = clock.now();
    for (let second = 0; second < 60; second++) {
      clock.set(start + second * 1000);
      const { response } = await send(handler, "/api/v1/platform");
      assert.deepEqual(rateOf(response), {
        status: 200,
        remaining: 59 - second,
        reset: 60 - second,
        retryAfter: null,
      }, `t=${second}s`);
    }
    clock.set(start + 59_500);
    assert.deepEqual(rateOf((await send(handler, "/api/v1/platform")).response), {
      status: 429,
      remaining: 0,
      reset: 1,
      retryAfter: "1",
    }, "0.5 s until the oldest leaves, rounded up");
    clock.set(start + 59_999);
    assert.equal(rateOf((await send(handler, "/")).response).retryAfter, "1");
    clock.set(start + 60_000);
    assert.deepEqual(rateOf((await send(handler, "/api/v1/platform")).response), {
      status: 200,
      remaining: 0,
      reset: 1,
      retryAfter: null,
    }, "the request of t=0 has left; the one of t=1 s is now the oldest");
    assert.equal((await send(handler, "/api/v1/platform")).response.status, 429);
    clock.set(start + 61_000);
    assert.equal((await send(handler, "/api/v1/platform")).response.status, 200);
  } finally {
    close();
  }
});

Deno.test("a burst refuses for the rest of the window and then restores the full quota", async () => {
  const { handler, clock, close } = setup();
  try {
    const start = clock.now();
    for (let i = 0; i < 60; i++) await send(handler, "/api/v1/platform");
    clock.set(start + 30_000);
    assert.deepEqual(rateOf((await send(handler, "/api/v1/platform")).response), {
      status: 429,
      remaining: 0,
      reset: 30,
      retryAfter: "30",
    });
    clock.set(start + 59_001);
    assert.equal(rateOf((await send(handler, "/api/v1/platform")).response).retryAfter, "1");
    clock.set(start + 60_000);
    assert.deepEqual(rateOf((await send(handler, "/api/v1/platform")).response), {
      status: 200,
      remaining: 59,
      reset: 60,
      retryAfter: null,
    });
  } finally {
    close();
  }
});

Deno.test("429s are not counted: refusals during the window do not extend it", async () => {
  const { handler, clock, close } = setup({ RATE_LIMIT: "2" });
  try {
    const start = clock.now();
    await send(handler, "/api/v1/platform");
    await send(handler, "/api/v1/platform");
    for (let second = 1; second < 60; second++) {
      clock.set(start + second * 1000);
      assert.equal((await send(handler, "/api/v1/platform")).response.status, 429);
    }
    clock.set(start + 60_000);
    assert.deepEqual(rateOf((await send(handler, "/api/v1/platform")).response), {
      status: 200,
      remaining: 1,
      reset: 60,
      retryAfter: null,
    });
  } finally {
    close();
  }
});

Deno.test("a CORS preflight is not counted and reports the state without changing it", async () => {
  const { handler, close } = setup({ RATE_LIMIT: "2" });
  try {
    for (let i = 0; i < 10; i++) {
      const { response } = await send(handler, "/api/v1/platform", {
        method: "OPTIONS",
        headers: PREFLIGHT,
      });
      assert.equal(response.status, 204);
      assert.equal(rateOf(response).remaining, 2);
    }
    assert.equal(rateOf((await send(handler, "/")).response).remaining, 1);
    assert.equal(rateOf((await send(handler, "/")).response).remaining, 0);
    const { response } = await send(handler, "/", { method: "OPTIONS", headers: PREFLIGHT });
    assert.equal(response.status, 204, "a preflight is answered even when the quota is spent");
    assert.equal(rateOf(response).remaining, 0);
  } finally {
    close();
  }
});

// ---------------------------------------------------------------------------------------------------
// Caller keys

Deno.test("an IPv4-mapped IPv6 peer shares its key with the IPv4 address", async () => {
  const { handler, close } = setup({ RATE_LIMIT: "3" });
  try {
    assert.equal(rateOf((await send(handler, "/", { peer: "192.0.2.7" })).response).remaining, 2);
    assert.equal(
      rateOf((await send(handler, "/", { peer: "::ffff:192.0.2.7" })).response).remaining,
      1,
    );
    assert.equal(
      rateOf((await send(handler, "/", { peer: "::ffff:c000:207" })).response).remaining,
      0,
    );
    assert.equal((await send(handler, "/", { peer: "192.0.2.7" })).response.status, 429);
    assert.equal((await send(handler, "/", { peer: "192.0.2.8" })).response.status, 200);
    assert.equal((await send(handler, "/", { peer: "::ffff:192.0.2.9" })).response.status, 200);
  } finally {
    close();
  }
});

Deno.test("IPv6 peers in one /64 share a key; another /64 has its own", async () => {
  const { handler, close } = setup({ RATE_LIMIT: "3" });
  try {
    const same = [
      "2001:db8:1:2::1",
      "2001:db8:1:2:ffff:ffff:ffff:ffff",
      "2001:0DB8:0001:0002:0:0:0:9",
    ];
    for (const [i, peer] of same.entries()) {
      const { response } = await send(handler, "/", { peer });
      assert.equal(rateOf(response).remaining, 2 - i, peer);
    }
    assert.equal((await send(handler, "/", { peer: "2001:db8:1:2::abcd" })).response.status, 429);
    assert.equal((await send(handler, "/", { peer: "2001:db8:1:3::1" })).response.status, 200);
    assert.equal((await send(handler, "/", { peer: "2001:db8:1::1" })).response.status, 200);
  } finally {
    close();
  }
});

Deno.test("forwarded headers are ignored unless trusted proxies are configured", async () => {
  const { handler, close } = setup({ RATE_LIMIT: "1" });
  try {
    const proxy = "10.0.0.1";
    const first = await send(handler, "/", {
      peer: proxy,
      headers: { "x-forwarded-for": "198.51.100.1", forwarded: "for=198.51.100.1" },
    });
    assert.equal(first.response.status, 200);
    const spoofed = await send(handler, "/", {
      peer: proxy,
      headers: { "x-forwarded-for": "198.51.100.2", forwarded: "for=198.51.100.2" },
    });
    assert.equal(spoofed.response.status, 429, "the peer is the caller, whatever it forwards");
    const other = await send(handler, "/", {
      peer: "10.0.0.2",
      headers: { "x-forwarded-for": "198.51.100.1" },
    });
    assert.equal(other.response.status, 200, "another peer is another caller");
  } finally {
    close();
  }
});

Deno.test("with TRUSTED_PROXIES, X-Forwarded-For is walked from the right past trusted proxies", async () => {
  const { handler, close } = setup({
    RATE_LIMIT: "1",
    TRUSTED_PROXIES: "10.0.0.0/8, 2001:db8:ffff::/48",
  });
  try {
    const status = async (peer: string, xff?: string) =>
      (await send(handler, "/", {
        peer,
        ...(xff === undefined ? {} : { headers: { "x-forwarded-for": xff } }),
      })).response.status;

    assert.equal(await status("10.0.0.1", "198.51.100.1"), 200);
    assert.equal(await status("10.0.0.2", "198.51.100.1"), 429, "one client through two proxies");
    assert.equal(
      await status("2001:db8:ffff::5", "198.51.100.1"),
      429,
      "and through an IPv6 proxy",
    );
    assert.equal(await status("10.0.0.1", "198.51.100.2"), 200, "another client");

    // A client cannot choose its key by prepending addresses: the rightmost untrusted one counts.
    assert.equal(await status("10.0.0.1", "203.0.113.66, 198.51.100.3"), 200);
    assert.equal(await status("10.0.0.1", "203.0.113.67, 198.51.100.3"), 429);
    // Trusted hops on the right are skipped.
    assert.equal(await status("10.0.0.1", "198.51.100.4, 10.9.9.9, 10.0.0.7"), 200);
    assert.equal(await status("10.0.0.3", "198.51.100.4"), 429);
    // IPv4-mapped and /64 rules apply to forwarded addresses too.
    assert.equal(await status("10.0.0.1", "::ffff:198.51.100.4"), 429);
    assert.equal(await status("10.0.0.1", "2001:db8:5:6::1"), 200);
    assert.equal(await status("10.0.0.1", "2001:db8:5:6::2"), 429);

    // An untrusted peer's forwarded header is ignored.
    assert.equal(await status("192.0.2.50", "198.51.100.5"), 200);
    assert.equal(await status("192.0.2.50", "198.51.100.6"), 429);
    // A trusted proxy that forwards nothing is itself the caller.
    assert.equal(await status("10.0.0.8"), 200);
    assert.equal(await status("10.0.0.8"), 429);
  } finally {
    close();
  }
});

Deno.test("with TRUSTED_PROXY_HEADER=forwarded, the for= values of Forwarded are used", async () => {
  const { handler, close } = setup({
    RATE_LIMIT: "1",
    TRUSTED_PROXIES: "10.0.0.0/8",
    TRUSTED_PROXY_HEADER: "forwarded",
  });
  try {
    const status = async (forwarded: string, xff = "192.0.2.99") =>
      (await send(handler, "/", {
        peer: "10.0.0.1",
        headers: { forwarded, "x-forwarded-for": xff },
      })).response.status;
    assert.equal(await status('for=192.0.2.60;proto=https, for="[2001:db8:7:8::1]:4711"'), 200);
    assert.equal(await status("for=198.51.100.9, for=2001:db8:7:8::2"), 429, "same /64");
    assert.equal(
      await status("for=198.51.100.9", "2001:db8:7:8::3"),
      200,
      "X-Forwarded-For ignored",
    );
  } finally {
    close();
  }
});

// ---------------------------------------------------------------------------------------------------
// Errors at the edge

class FailingStore implements RateLimitStore {
  constructor(readonly mode: "throw" | "reject") {}
  hit(): Decision | Promise<Decision> {
    const error = new Error("store exploded: secret-detail");
    if (this.mode === "throw") throw error;
    return Promise.reject(error);
  }
  peek(): Decision | Promise<Decision> {
    return this.hit();
  }
  close(): void {}
}

for (const mode of ["throw", "reject"] as const) {
  Deno.test(`an error inside the handler (store ${mode}s) answers 500 internal_error JSON with no stack`, async () => {
    const { handler, errors, records } = setup({}, new FailingStore(mode));
    for (const [method, headers] of [["GET", {}], ["OPTIONS", PREFLIGHT]] as const) {
      const { response, text } = await send(handler, "/api/v1/platform", { method, headers });
      assert.equal(response.status, 500, method);
      assert.equal(response.headers.get("content-type"), "application/json");
      assert.equal(response.headers.get("cache-control"), "no-store");
      assert.equal(response.headers.get("x-content-type-options"), "nosniff");
      assert.equal(response.headers.get("access-control-allow-origin"), "*");
      const body = JSON.parse(text) as { error: Record<string, string> };
      assert.deepEqual(Object.keys(body), ["error"]);
      assert.deepEqual(Object.keys(body.error).sort(), ["code", "hint", "message"]);
      assert.equal(body.error.code, "internal_error");
      assert.ok(!text.includes("secret-detail"), "the error's message is not sent");
      assert.ok(!/\bat .*:\d+:\d+|\.ts\b|Error:/.test(text), "no stack trace");
    }
    assert.equal(errors.length, 2, "each error is reported once");
    assert.match(String(errors[0]), /secret-detail/);
    assert.deepEqual(records.map((r) => r.status), [500, 500], "and logged as 500");
  });
}

/**
 * A store whose answers are thenables that are not `instanceof Promise`, as a Durable Object's RPC
 * results are on Workers; the decisions are the memory store's.
 */
class ThenableStore implements RateLimitStore {
  constructor(readonly inner: MemoryStore) {}
  hit(key: string, now: number): Promise<Decision> {
    const decision = this.inner.hit(key, now);
    return { then: (resolve: (d: Decision) => unknown) => resolve(decision) } as Promise<Decision>;
  }
  peek(key: string, now: number): Promise<Decision> {
    const decision = this.inner.peek(key, now);
    return { then: (resolve: (d: Decision) => unknown) => resolve(decision) } as Promise<Decision>;
  }
  close(): void {}
}

Deno.test("a store answering thenables that are not promises (a Durable Object's RPC) is waited for, not taken for a decision", async () => {
  const config = testConfig({});
  const store = new ThenableStore(new MemoryStore(policyOf(config), { sweep: false }));
  const { handler, errors } = setup({}, store);
  const first = await send(handler, "/api/v1/platform");
  assert.equal(first.response.status, 200);
  assert.equal(first.response.headers.get("ratelimit-remaining"), "59");
  const preflight = await send(handler, "/api/v1/platform", {
    method: "OPTIONS",
    headers: PREFLIGHT,
  });
  assert.equal(preflight.response.status, 204);
  assert.equal(preflight.response.headers.get("ratelimit-remaining"), "59");
  for (let i = 0; i < 59; i++) await send(handler, "/api/v1/platform");
  assert.equal((await send(handler, "/api/v1/platform")).response.status, 429);
  assert.deepEqual(errors, []);
});

Deno.test("a 500 still carries what the served OpenAPI document requires of every response", async () => {
  // The document marks the five RateLimit fields required on InternalError, as on every response,
  // and says every response of /api/v1/platform, whatever its status, carries Link.
  const { handler, openapi } = setup({}, new FailingStore("throw"));
  const contract = createContract(JSON.parse(openapi) as OpenApiDocument);
  const request = new Request("http://localhost/api/v1/platform");
  const response = await handler(request, { remoteAddr: { hostname: "192.0.2.1" } });
  const body = new Uint8Array(await response.arrayBuffer());
  assert.equal(response.status, 500);
  const problems: string[] = [];
  try {
    contract.check("/api/v1/platform", "GET", { status: 500, headers: response.headers, body });
  } catch (error) {
    problems.push((error as Error).message);
  }
  if (!response.headers.has("link")) problems.push("no Link on a response of /api/v1/platform");
  assert.deepEqual(problems, []);
});

Deno.test("behind a trusted proxy the access log keeps the client, truncated, not the proxy", async () => {
  const { handler, records, close } = setup({ TRUSTED_PROXIES: "10.0.0.0/8" });
  try {
    await send(handler, "/llms.txt", {
      peer: "10.1.2.3",
      headers: { "x-forwarded-for": "203.0.113.9, 10.0.0.7" },
    });
    await send(handler, "/llms.txt", {
      peer: "10.1.2.3",
      headers: { "x-forwarded-for": "2001:db8:abcd:12::5" },
    });
    assert.deepEqual(records.map((r) => r.caller), ["203.0.113.0", "2001:db8:abcd::"]);
  } finally {
    close();
  }
});

Deno.test("a preflight is never refused: no Retry-After, on known and unknown paths", async () => {
  const { handler, close } = setup({ RATE_LIMIT: "1" });
  try {
    await send(handler, "/llms.txt");
    assert.equal((await send(handler, "/llms.txt")).response.status, 429);
    const preflight = { origin: "https://app.example", "access-control-request-method": "GET" };
    for (const path of ["/llms.txt", "/nope"]) {
      const { response } = await send(handler, path, { method: "OPTIONS", headers: preflight });
      assert.equal(response.headers.get("retry-after"), null, path);
      assert.equal(response.headers.get("ratelimit-remaining"), "0", path);
    }
  } finally {
    close();
  }
});

Deno.test("a CORS preflight to an unknown path is granted 204, uncounted; the real request gets its 404", async () => {
  const { handler, close } = setup({ RATE_LIMIT: "5" });
  try {
    const preflight = {
      origin: "https://app.example",
      "access-control-request-method": "GET",
      "access-control-request-headers": "if-none-match",
    };
    for (const path of ["/api/v2/platform", "/nope/deeper", "/api/v1/platform"]) {
      const { response, text: body } = await send(handler, path, {
        method: "OPTIONS",
        headers: preflight,
      });
      assert.equal(response.status, 204, path);
      assert.equal(body, "", path);
      assert.equal(response.headers.get("access-control-allow-origin"), "*", path);
      assert.equal(
        response.headers.get("access-control-allow-methods"),
        "GET, HEAD, OPTIONS",
        path,
      );
      assert.match(
        response.headers.get("access-control-allow-headers") ?? "",
        /(^|, )If-None-Match(,|$)/i,
        path,
      );
      assert.equal(response.headers.get("ratelimit-remaining"), "5", `${path}: not counted`);
    }
    const { response, text: body } = await send(handler, "/api/v2/platform", {
      headers: { origin: "https://app.example", "if-none-match": '"x"' },
    });
    assert.equal(response.status, 404);
    assert.equal(JSON.parse(body).error.code, "not_found");
    assert.equal(response.headers.get("access-control-allow-origin"), "*");
    assert.equal(response.headers.get("ratelimit-remaining"), "4", "the real request is counted");
    const plain = await send(handler, "/api/v2/platform", { method: "OPTIONS" });
    assert.equal(plain.response.status, 404, "an OPTIONS that is not a preflight is a request");
  } finally {
    close();
  }
});

// ---------------------------------------------------------------------------------------------------
// Access log

Deno.test("the access log keeps the path without query string and a truncated caller", async () => {
  const { handler, clock, records, close } = setup({ RATE_LIMIT: "3" });
  try {
    await send(handler, "/api/v1/platform?client=Acme%20v.%20Smith&token=s3cr3t#frag", {
      peer: "192.0.2.77",
    });
    await send(handler, "/nope?matter=12345", { peer: "2001:db8:abcd:12:1:2:3:4", method: "POST" });
    await send(handler, "/developers?x=1", { peer: "::ffff:198.51.100.200", method: "HEAD" });
    for (let i = 0; i < 3; i++) await send(handler, "/llms.txt", { peer: "192.0.2.77" });
    assert.deepEqual(
      records.map(({ method, path, status, caller }) => ({ method, path, status, caller })),
      [
        { method: "GET", path: "/api/v1/platform", status: 200, caller: "192.0.2.0" },
        { method: "POST", path: "/nope", status: 404, caller: "2001:db8:abcd::" },
        { method: "HEAD", path: "/developers", status: 200, caller: "198.51.100.0" },
        { method: "GET", path: "/llms.txt", status: 200, caller: "192.0.2.0" },
        { method: "GET", path: "/llms.txt", status: 200, caller: "192.0.2.0" },
        { method: "GET", path: "/llms.txt", status: 429, caller: "192.0.2.0" },
      ],
    );
    const all = JSON.stringify(records);
    for (const secret of ["s3cr3t", "Acme", "12345", "frag", "192.0.2.77", "2001:db8:abcd:12"]) {
      assert.ok(!all.includes(secret), `the log never holds ${secret}`);
    }
    assert.equal(records[0]!.time, new Date(clock.now()).toISOString(), "time from the clock");
    assert.equal(records[0]!.ms, 0, "no time passed on the manual clock");
  } finally {
    close();
  }
});

// ---------------------------------------------------------------------------------------------------
// Built on demand and warmed up in the background

/** The status, coding, ETag and raw bytes of `GET path` with `Accept-Encoding: encoding`. */
async function rawVariant(handler: Handler, path: string, encoding: string, accept = "*/*") {
  const response = await handler(
    new Request(`http://localhost${path}`, {
      headers: { "accept-encoding": encoding, accept },
    }),
    { remoteAddr: { transport: "tcp", hostname: "192.0.2.9", port: 1 } },
  );
  return {
    status: response.status,
    coding: response.headers.get("content-encoding"),
    etag: response.headers.get("etag"),
    bytes: new Uint8Array(await response.arrayBuffer()),
  };
}

const WARMED_PATHS = ["/", "/developers", "/openapi.json", "/llms.txt", "/api/v1/platform"];

Deno.test("the warm-up builds every representation and coding, and answers equal those built by the first request", async () => {
  const config = testConfig({ RATE_LIMIT: "1000" });
  const content = testContent(config);
  const policy = { limit: 1000, windowMs: 60_000 };
  const { promise: warmed, resolve } = Promise.withResolvers<{ variants: number; ms: number }>();
  const errors: unknown[] = [];
  const stores = [
    new MemoryStore(policy, { sweep: false }),
    new MemoryStore(policy, { sweep: false }),
  ];
  try {
    const warm = createHandler({
      config,
      content,
      store: stores[0]!,
      warmUp: { delayMs: 0, onDone: resolve, onError: (error) => errors.push(error) },
    });
    const report = await warmed;
    assert.deepEqual(errors, []);
    // Every representation of every path (aliases count once), in three codings.
    let representations = 0;
    for (const path of new Set((await preparedPaths(config, content)).values())) {
      representations += path.representations().length;
    }
    assert.ok(representations >= 14, `${representations} representations`);
    assert.equal(report.variants, representations * 3);
    const onDemand = createHandler({ config, content: testContent(config), store: stores[1]! });
    for (const path of WARMED_PATHS) {
      for (const encoding of ["br", "gzip", "identity"]) {
        for (const accept of ["*/*", "text/markdown"]) {
          const built = await rawVariant(onDemand, path, encoding, accept);
          const ready = await rawVariant(warm, path, encoding, accept);
          assert.equal(built.status, 200, `${path} ${encoding} ${accept}`);
          assert.deepEqual(ready, built, `${path} ${encoding} ${accept}`);
          if (encoding !== "identity" && path !== "/api/v1/platform") {
            assert.equal(built.coding, encoding, `${path} ${encoding} ${accept}`);
          }
        }
      }
    }
  } finally {
    for (const store of stores) store.close();
  }
});

Deno.test("createHandler() schedules its warm-up without reading a lazily loaded global (Node's timers)", () => {
  const config = testConfig();
  const store = new MemoryStore(policyOf(config), { sweep: false });
  const stop = new AbortController();
  try {
    const read = lazyGlobalsReadBy(() =>
      createHandler({
        config,
        content: testContent(config),
        store,
        warmUp: { signal: stop.signal },
      })
    );
    assert.deepEqual(read, []);
  } finally {
    stop.abort();
    store.close();
  }
});

Deno.test("an aborted warm-up stops after the step under way and does not report itself done", async () => {
  const config = testConfig();
  const policy = { limit: 60, windowMs: 60_000 };
  const stores = [
    new MemoryStore(policy, { sweep: false }),
    new MemoryStore(policy, { sweep: false }),
  ];
  const stop = new AbortController();
  const done: unknown[] = [];
  const { promise: otherDone, resolve } = Promise.withResolvers<unknown>();
  try {
    const handler = createHandler({
      config,
      content: testContent(config),
      store: stores[0]!,
      warmUp: { delayMs: 0, signal: stop.signal, onDone: (report) => done.push(report) },
    });
    // A second warm-up of the same size, not aborted, runs step for step beside the first: when it
    // is done, the first would have been too.
    createHandler({
      config,
      content: testContent(config),
      store: stores[1]!,
      warmUp: { delayMs: 0, onDone: resolve },
    });
    stop.abort();
    await otherDone;
    assert.deepEqual(done, []);
    // Whatever was not built is built on demand.
    const response = await rawVariant(handler, "/openapi.json", "br");
    assert.equal(response.status, 200);
    assert.equal(response.coding, "br");
  } finally {
    for (const store of stores) store.close();
  }
});

Deno.test("createHandler() builds no representation before it is needed: a path's first request builds its own (JSON without its Markdown), prepare() builds them all", async () => {
  const config = testConfig();
  const content = testContent(config);
  const read: string[] = [];
  const counted = new Proxy(content, {
    get(target, name, receiver) {
      if (["openapi", "llms", "platformJson", "platformMarkdown"].includes(String(name))) {
        read.push(String(name));
      }
      return Reflect.get(target, name, receiver);
    },
  });
  const store = new MemoryStore(policyOf(config), { sweep: false });
  const handler = createHandler({ config, content: counted, store });
  try {
    assert.deepEqual(read, [], "a body was read before any request");
    const { response } = await send(handler, "/api/v1/platform");
    assert.equal(response.status, 200);
    // Not its Markdown: that one waits for the tokenizer (x-markdown-tokens), a JSON request never.
    assert.deepEqual(read, ["platformJson"]);
    await handler.prepare();
    assert.deepEqual(read.sort(), ["llms", "openapi", "platformJson", "platformMarkdown"]);
    const openapi = await send(handler, "/openapi.json");
    assert.equal(openapi.text, content.openapi);
  } finally {
    store.close();
  }
});

// ---------------------------------------------------------------------------------------------------
// Hostile header values (issue 31, item 1): each parser receives at most a bounded value

Deno.test("an Accept or Accept-Encoding over MAX_NEGOTIATED_LENGTH is treated as absent; one at it is read", async () => {
  const { handler, close } = setup({ RATE_LIMIT: "1000" });
  try {
    const typeOf = async (accept: string) =>
      (await send(handler, "/api/v1/platform", { headers: { accept } })).response.headers.get(
        "content-type",
      );
    const markdownFirst = (length: number) =>
      `text/markdown,${"a/b;q=0.1,".repeat(40)}`.slice(0, length - 1) + "x";
    assert.match((await typeOf(markdownFirst(MAX_NEGOTIATED_LENGTH)))!, /^text\/markdown/);
    assert.match((await typeOf(markdownFirst(MAX_NEGOTIATED_LENGTH + 1)))!, /^application\/json/);
    // The pathological shape of the review: a quote, then tens of thousands of commas.
    assert.match((await typeOf(`"${",".repeat(30_000)}`))!, /^application\/json/);
    // Codings are picked by the same bound (the handler sends gzip only once the warm-up ran).
    const gzipFirst = (length: number) => `gzip,${"x;q=0.1,".repeat(40)}`.slice(0, length);
    assert.equal(preferredEncoding(gzipFirst(MAX_NEGOTIATED_LENGTH)), "gzip");
    assert.equal(preferredEncoding(gzipFirst(MAX_NEGOTIATED_LENGTH + 1)), "identity");
    const seen: (string | null)[] = [];
    const pick = memoize((value) => seen.push(value));
    pick(gzipFirst(MAX_NEGOTIATED_LENGTH + 1));
    assert.deepEqual(seen, [null], "the memo's function never receives a longer value");
  } finally {
    close();
  }
});

Deno.test("an If-None-Match over MAX_IF_NONE_MATCH_LENGTH is treated as absent, a Host over MAX_HOST_LENGTH is invalid", async () => {
  const { handler, close } = setup({ RATE_LIMIT: "1000" });
  try {
    const etag = (await send(handler, "/api/v1/platform")).response.headers.get("etag")!;
    const list = (length: number) => `${'"x", '.repeat(300)}`.slice(0, length - etag.length) + etag;
    const statusWith = async (headers: Record<string, string>) =>
      (await send(handler, "/api/v1/platform", { headers })).response.status;
    assert.equal(await statusWith({ "if-none-match": list(MAX_IF_NONE_MATCH_LENGTH) }), 304);
    assert.equal(await statusWith({ "if-none-match": list(MAX_IF_NONE_MATCH_LENGTH + 1) }), 200);
    const host = (length: number) => `${"a".repeat(60)}.`.repeat(5).slice(0, length - 5) + ".x:80";
    assert.equal(await statusWith({ host: host(MAX_HOST_LENGTH) }), 200);
    assert.equal(await statusWith({ host: host(MAX_HOST_LENGTH + 1) }), 400);
  } finally {
    close();
  }
});

Deno.test("a forwarded header is read from its right end only: MAX_FORWARDED_LENGTH characters, MAX_FORWARDED_HOPS entries", async (t) => {
  for (const header of ["x-forwarded-for", "forwarded"] as const) {
    await t.step(header, async () => {
      const { handler, close } = setup({
        RATE_LIMIT: "1000",
        TRUSTED_PROXIES: "10.0.0.0/8",
        TRUSTED_PROXY_HEADER: header,
      });
      const entry = (address: string) => header === "forwarded" ? `for=${address}` : address;
      const remainingWith = async (value: string) =>
        Number(
          (await send(handler, "/api/v1/platform", {
            peer: "10.0.0.1",
            headers: { [header]: value },
          }))
            .response.headers.get("ratelimit-remaining"),
        );
      try {
        // Kilobytes a client wrote itself, then the address the trusted proxy appended: that one.
        const junk = `${entry("1".repeat(5000))}, ${entry("198.51.100.1")}, `.repeat(4);
        assert.equal(await remainingWith(`${junk}${entry("192.0.2.9")}`), 999);
        assert.equal(await remainingWith(entry("192.0.2.9")), 998, "the same caller");
        assert.ok(`${junk}${entry("192.0.2.9")}`.length > MAX_FORWARDED_LENGTH);
        // More trusted hops than the walk takes: it ends at the last one reached, not the far left.
        const hops = Array.from({ length: MAX_FORWARDED_HOPS + 3 }, (_, i) => entry(`10.0.1.${i}`));
        assert.equal(await remainingWith([entry("192.0.2.77"), ...hops].join(", ")), 999);
        assert.equal(await remainingWith(entry("192.0.2.77")), 999, "192.0.2.77 was not reached");
        assert.equal(await remainingWith(entry("10.0.1.3")), 998, "the hop where the walk ended");
      } finally {
        close();
      }
    });
  }
});
