/**
 * The Worker's entry in process (`lib/workers/worker.ts`, `bindings.ts`): what it makes of its
 * bindings and of `CF-Connecting-IP`, without workerd (the files beside this one run it there).
 *
 * @module
 */

import assert from "node:assert/strict";
import { STATIC_DIR, STATIC_FILES } from "../../lib/pages/content.ts";
import { bindingsEnv, workerConfig } from "../../lib/workers/bindings.ts";
import { createWorker, peerOf } from "../../lib/workers/worker.ts";

const FILES = Object.fromEntries(
  STATIC_FILES.map((name) => [name, Deno.readTextFileSync(`${STATIC_DIR}/${name}`)]),
);
const ORIGIN = "https://api.example.com";

Deno.test("bindingsEnv() reads vars and secrets (strings), not binding objects; PUBLIC_BASE_URL defaults to the origin", () => {
  const env = bindingsEnv({ RATE_LIMIT: "5", RATE_LIMITER: {}, PRODUCT_NAME: 7 }, ORIGIN);
  assert.equal(env("RATE_LIMIT"), "5");
  assert.equal(env("PRODUCT_NAME"), undefined);
  assert.equal(env("PUBLIC_BASE_URL"), ORIGIN);
  assert.equal(
    bindingsEnv({ PUBLIC_BASE_URL: "https://b.example" }, ORIGIN)("PUBLIC_BASE_URL"),
    "https://b.example",
  );
});

Deno.test("workerConfig() refuses kv and redis, a missing binding, and a limit the Durable Object cannot hold", () => {
  const problems = (bindings: Record<string, unknown>) => {
    const result = workerConfig(bindings, ORIGIN);
    return result.ok ? [] : result.errors;
  };
  assert.match(
    problems({ RATE_LIMIT_STORE: "kv", RATE_LIMITER: {} }).join(),
    /not available on Workers/,
  );
  assert.match(
    problems({ RATE_LIMIT_STORE: "redis", REDIS_URL: "redis://x" }).join(),
    /not available/,
  );
  assert.match(problems({}).join(), /binding RATE_LIMITER is missing/);
  assert.match(problems({ RATE_LIMITER: {}, RATE_LIMIT: "20000" }).join(), /limit of 1 to 10000/);
  assert.deepEqual(problems({ RATE_LIMIT_STORE: "memory", RATE_LIMIT: "20000" }), []);
  const ok = workerConfig({ RATE_LIMITER: {} }, ORIGIN);
  assert.ok(ok.ok && ok.store === "durable-object" && ok.config.baseUrl === ORIGIN);
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

Deno.test("a hostile CF-Connecting-IP shares the no-address budget instead of getting one of its own", async () => {
  const worker = createWorker(FILES, () => assert.fail("no Durable Object with memory"));
  const env = { RATE_LIMIT_STORE: "memory", ACCESS_LOG: "false" };
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
