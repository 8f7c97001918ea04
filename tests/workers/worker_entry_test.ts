/**
 * The Worker's entry in process (`lib/workers/worker.ts`, `bindings.ts`): what it makes of its
 * bindings and of `CF-Connecting-IP`, without workerd (the files beside this one run it there).
 *
 * @module
 */

import assert from "node:assert/strict";
import { STATIC_DIR, STATIC_FILES } from "../../lib/pages/content.ts";
import { loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import { bindingsEnv, workerConfig } from "../../lib/workers/bindings.ts";
import { workersMaxCallers } from "../../lib/workers/memory_cap.ts";
import { createWorker, peerOf } from "../../lib/workers/worker.ts";

const FILES = Object.fromEntries(
  STATIC_FILES.map((name) => [name, Deno.readTextFileSync(`${STATIC_DIR}/${name}`)]),
);
const ORIGIN = "https://api.example.com";

const BASE = { PUBLIC_BASE_URL: ORIGIN } as const;

/** The problems `workerConfig` finds in `bindings`, none when it is valid. */
function problems(bindings: Record<string, unknown>): string[] {
  const result = workerConfig(bindings);
  return result.ok ? [] : result.errors;
}

Deno.test("bindingsEnv() reads vars as text, JSON numbers and booleans as theirs; no default comes from a request", () => {
  const env = bindingsEnv({ RATE_LIMIT: 5, ACCESS_LOG: false, RATE_LIMITER: {}, PRODUCT_NAME: {} });
  assert.equal(env("RATE_LIMIT"), "5");
  assert.equal(env("ACCESS_LOG"), "false");
  assert.equal(env("PRODUCT_NAME"), undefined);
  assert.equal(env("PUBLIC_BASE_URL"), undefined);
  assert.equal(bindingsEnv(BASE)("PUBLIC_BASE_URL"), ORIGIN);
});

Deno.test("workerConfig() reads wrangler.json's JSON values as deno task start reads their text, and refuses objects, arrays and null by name", () => {
  const ok = workerConfig({ ...BASE, RATE_LIMITER: {}, RATE_LIMIT: 5, ACCESS_LOG: true });
  assert.ok(ok.ok);
  assert.equal(ok.config.rateLimit, 5);
  assert.equal(ok.config.accessLog, true);
  // The same sentence deno task start prints for RATE_LIMIT=5.5 and =true.
  const denoSentence = (raw: string) => {
    const loaded = loadConfig(recordEnv({ RATE_LIMIT: raw }));
    return loaded.ok ? "" : loaded.errors[0]!;
  };
  assert.deepEqual(problems({ ...BASE, RATE_LIMITER: {}, RATE_LIMIT: 5.5 }), [denoSentence("5.5")]);
  assert.deepEqual(problems({ ...BASE, RATE_LIMITER: {}, RATE_LIMIT: true }), [
    denoSentence("true"),
  ]);
  for (const value of [{ n: 5 }, [5], null]) {
    const found = problems({ ...BASE, RATE_LIMITER: {}, RATE_LIMIT: value });
    assert.equal(found.length, 1, JSON.stringify(found));
    assert.match(found[0]!, /^RATE_LIMIT must be text, a number or true\/false/);
  }
});

Deno.test("workerConfig() requires PUBLIC_BASE_URL, naming it", () => {
  for (const bindings of [{ RATE_LIMITER: {} }, { RATE_LIMITER: {}, PUBLIC_BASE_URL: " " }]) {
    const found = problems(bindings);
    assert.equal(found.length, 1);
    assert.match(found[0]!, /^PUBLIC_BASE_URL must be set on Workers/);
  }
  assert.match(
    problems({ RATE_LIMITER: {}, PUBLIC_BASE_URL: "https://a.example." }).join(),
    /host/,
  );
});

Deno.test("workerConfig() compares RATE_LIMIT_STORE as loadConfig does: Memory is memory, KV is refused", () => {
  const memory = workerConfig({ ...BASE, RATE_LIMIT_STORE: "Memory" });
  assert.ok(memory.ok && memory.store === "memory");
  assert.match(
    problems({ ...BASE, RATE_LIMIT_STORE: "KV", RATE_LIMITER: {} }).join(),
    /not available/,
  );
  assert.match(problems({ ...BASE, RATE_LIMIT_STORE: "Redis" }).join(), /not available/);
  assert.match(problems({ ...BASE, RATE_LIMIT_STORE: "disk" }).join(), /RATE_LIMIT_STORE must be/);
  const unset = workerConfig({ ...BASE, RATE_LIMIT_STORE: "", RATE_LIMITER: {} });
  assert.ok(unset.ok && unset.store === "durable-object");
});

Deno.test("workerConfig() refuses a missing binding and a limit the Durable Object cannot hold", () => {
  assert.match(problems(BASE).join(), /binding RATE_LIMITER is missing/);
  assert.match(problems({ ...BASE, RATE_LIMITER: {}, RATE_LIMIT: "20000" }).join(), /1 to 10000/);
  assert.deepEqual(problems({ ...BASE, RATE_LIMIT_STORE: "memory", RATE_LIMIT: "20000" }), []);
});

Deno.test("workerConfig() sizes the memory store for an isolate: its cap by default, a larger one refused by name", () => {
  const memory = workerConfig({ ...BASE, RATE_LIMIT_STORE: "memory" });
  assert.ok(memory.ok);
  assert.equal(memory.config.rateLimitMaxCallers, workersMaxCallers(60));
  const lower = workerConfig({ ...BASE, RATE_LIMIT_STORE: "memory", RATE_LIMIT_MAX_CALLERS: 1000 });
  assert.ok(lower.ok && lower.config.rateLimitMaxCallers === 1000);
  assert.match(
    problems({ ...BASE, RATE_LIMIT_STORE: "memory", RATE_LIMIT_MAX_CALLERS: "500000" }).join(),
    /^RATE_LIMIT_MAX_CALLERS must be at most 48302 on Workers/,
  );
  // The Durable Object keeps no callers in the isolate: the variable is Deno's there.
  const durable = workerConfig({ ...BASE, RATE_LIMITER: {}, RATE_LIMIT_MAX_CALLERS: "500000" });
  assert.ok(durable.ok);
});

Deno.test("workerConfig() leaves the access log off unless ACCESS_LOG is set (Workers Logs logs each invocation)", () => {
  const off = workerConfig({ ...BASE, RATE_LIMITER: {} });
  assert.ok(off.ok && off.config.accessLog === false);
  const on = workerConfig({ ...BASE, RATE_LIMITER: {}, ACCESS_LOG: "true" });
  assert.ok(on.ok && on.config.accessLog === true);
});

Deno.test("peerOf() takes CF-Connecting-IP only when it is an IP address", () => {
  const peer = (value?: string) =>
    peerOf(
      new Request(ORIGIN, value === undefined ? {} : { headers: { "cf-connecting-ip": value } }),
    )
      .remoteAddr;
  assert.deepEqual(peer("203.0.113.7"), { hostname: "203.0.113.7" });
  assert.deepEqual(peer("2001:db8::1"), { hostname: "2001:db8::1" });
  assert.deepEqual(peer(), { transport: "none" });
  assert.deepEqual(peer("x".repeat(10_000)), { transport: "none" });
  assert.deepEqual(peer("203.0.113.7, 198.51.100.1"), { transport: "none" });
});

Deno.test("peerOf() takes CF-Connecting-IPv6 only beside a Pseudo IPv4 address (240.0.0.0/4), when it is an IPv6 address", () => {
  const peer = (headers: Record<string, string>) =>
    peerOf(new Request(ORIGIN, { headers })).remoteAddr;
  const pseudo = "240.1.2.3";
  assert.deepEqual(peer({ "cf-connecting-ip": pseudo, "cf-connecting-ipv6": "2001:db8::7" }), {
    hostname: "2001:db8::7",
  });
  assert.deepEqual(peer({ "cf-connecting-ip": pseudo, "cf-connecting-ipv6": "192.0.2.1" }), {
    hostname: pseudo,
  });
  assert.deepEqual(peer({ "cf-connecting-ip": pseudo, "cf-connecting-ipv6": "garbage" }), {
    hostname: pseudo,
  });
  // A real IPv4 caller (Pseudo IPv4 off, the default: Cloudflare sets no CF-Connecting-IPv6) cannot
  // pick a key of its own by sending one: a new /64 per request would never be limited.
  assert.deepEqual(
    peer({ "cf-connecting-ip": "198.51.100.7", "cf-connecting-ipv6": "2001:db8::1" }),
    {
      hostname: "198.51.100.7",
    },
  );
  assert.deepEqual(
    peer({ "cf-connecting-ip": "2001:db8::9", "cf-connecting-ipv6": "2001:db8::1" }),
    {
      hostname: "2001:db8::9",
    },
  );
  assert.deepEqual(peer({ "cf-connecting-ipv6": "2001:db8::1" }), { transport: "none" });
});

Deno.test("a hostile CF-Connecting-IP shares the no-address budget instead of getting one of its own", async () => {
  const worker = createWorker(FILES, () => assert.fail("no Durable Object with memory"));
  const env = { ...BASE, RATE_LIMIT_STORE: "memory", ACCESS_LOG: "false" };
  const remaining: string[] = [];
  for (const value of ["garbage-1", "garbage-2", "<script>"]) {
    const request = new Request(`${ORIGIN}/api/v1/platform`, {
      headers: { "cf-connecting-ip": value },
    });
    const response = await worker.fetch(request, env);
    await response.body?.cancel();
    remaining.push(response.headers.get("ratelimit-remaining")!);
  }
  assert.deepEqual(remaining, ["59", "58", "57"]);
});

Deno.test("workerConfig() refuses by name every store a Worker cannot open (kv, redis, sqlite) rather than keep the limit in the Durable Object unsaid", () => {
  const cases = [
    { RATE_LIMIT_STORE: "kv", KV_PATH: "/tmp/limits.sqlite3" },
    { RATE_LIMIT_STORE: "Redis", REDIS_URL: "redis://127.0.0.1:6379" },
    { RATE_LIMIT_STORE: "sqlite", SQLITE_PATH: "/tmp/hits.sqlite3" },
  ];
  for (const vars of cases) {
    const found = problems({ ...BASE, RATE_LIMITER: {}, ...vars });
    const name = vars.RATE_LIMIT_STORE.toLowerCase();
    assert.ok(
      found.some((p) => p.startsWith(`RATE_LIMIT_STORE=${name} is not available on Workers`)),
      `${name}: ${JSON.stringify(found)}`,
    );
  }
  assert.deepEqual(problems({ ...BASE, RATE_LIMITER: {}, RATE_LIMIT_STORE: "Memory" }), []);
});
