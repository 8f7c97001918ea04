/**
 * Choosing the store: the configuration of the shared stores (defaults, every problem listed) and
 * `openRateLimitStore` building what the configuration names.
 *
 * @module
 */

import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/config.ts";
import { type Env, type EnvName, recordEnv } from "../../lib/config/env.ts";
import { MemoryStore } from "../../lib/limit/memory/memory_store.ts";
import { BREAKER_DEFAULTS } from "../../lib/limit/guard/circuit_breaker.ts";
import { GuardedStore } from "../../lib/limit/guard/guarded_store.ts";
import { openRateLimitStore } from "../../lib/limit/open_store.ts";
import { freePort } from "../_redis.ts";

function configOf(env: Partial<Record<EnvName, string>>) {
  const result = loadConfig(recordEnv(env) satisfies Env);
  if (!result.ok) throw new Error(result.errors.join("; "));
  return result.config;
}

Deno.test("the memory store, a 100 ms bound and fail open are the defaults", () => {
  const config = configOf({});
  assert.equal(config.rateLimitStore, "memory");
  assert.equal(config.kvPath, undefined);
  assert.equal(config.redisUrl, undefined);
  assert.equal(config.rateLimitStoreTimeoutMs, 100);
  assert.equal(config.rateLimitOnStoreError, "open");
  assert.equal(config.rateLimitConsistency, "exact");
  assert.equal(config.rateLimitSyncMs, 50);
});

Deno.test("RATE_LIMIT_CONSISTENCY and RATE_LIMIT_SYNC_MS are read, and bad values listed", () => {
  const config = configOf({ RATE_LIMIT_CONSISTENCY: "Local-First", RATE_LIMIT_SYNC_MS: "200" });
  assert.equal(config.rateLimitConsistency, "local-first");
  assert.equal(config.rateLimitSyncMs, 200);
  const result = loadConfig(
    recordEnv({ RATE_LIMIT_CONSISTENCY: "eventual", RATE_LIMIT_SYNC_MS: "0" }),
  );
  assert.deepEqual(result.ok ? [] : result.errors, [
    'RATE_LIMIT_CONSISTENCY must be exact or local-first, got "eventual"',
    "RATE_LIMIT_SYNC_MS must be from 1 to 60000, got 0",
  ]);
});

Deno.test("store settings are read case-insensitively", () => {
  const config = configOf({
    RATE_LIMIT_STORE: "Redis",
    REDIS_URL: "rediss://cache.example:6380/2",
    RATE_LIMIT_ON_STORE_ERROR: "CLOSED",
    RATE_LIMIT_STORE_TIMEOUT_MS: "25",
  });
  assert.equal(config.rateLimitStore, "redis");
  assert.equal(config.redisUrl, "rediss://cache.example:6380/2");
  assert.equal(config.rateLimitOnStoreError, "closed");
  assert.equal(config.rateLimitStoreTimeoutMs, 25);
});

Deno.test("every store setting problem is listed at once, without the Redis password", () => {
  const result = loadConfig(recordEnv({
    RATE_LIMIT_STORE: "memcached",
    REDIS_URL: "http://user:hunter2@cache.example",
    RATE_LIMIT_STORE_TIMEOUT_MS: "0",
    RATE_LIMIT_ON_STORE_ERROR: "maybe",
  }));
  assert.equal(result.ok, false);
  const errors = result.ok ? [] : result.errors;
  assert.deepEqual(errors, [
    'RATE_LIMIT_STORE must be memory, kv, redis or sqlite, got "memcached"',
    'REDIS_URL must be a redis:// or rediss:// URL, got "http://user:***@cache.example"',
    "RATE_LIMIT_STORE_TIMEOUT_MS must be from 1 to 60000, got 0",
    'RATE_LIMIT_ON_STORE_ERROR must be open or closed, got "maybe"',
  ]);
  assert.ok(!errors.join("\n").includes("hunter2"));
});

Deno.test("the redis store requires REDIS_URL", () => {
  const result = loadConfig(recordEnv({ RATE_LIMIT_STORE: "redis" }));
  assert.deepEqual(result.ok ? [] : result.errors, [
    "REDIS_URL is required with RATE_LIMIT_STORE=redis (e.g. redis://127.0.0.1:6379)",
  ]);
});

Deno.test("the kv store rejects a limit larger than one KV value holds, in exact only", () => {
  const result = loadConfig(recordEnv({ RATE_LIMIT_STORE: "kv", RATE_LIMIT: "8001" }));
  assert.equal(result.ok, false);
  assert.match(
    result.ok ? "" : result.errors[0]!,
    /^RATE_LIMIT must be at most 8000 with RATE_LIMIT_STORE=kv and RATE_LIMIT_CONSISTENCY=exact/,
  );
  assert.equal(loadConfig(recordEnv({ RATE_LIMIT: "8001" })).ok, true, "memory has no such cap");
  const localFirst = { RATE_LIMIT_STORE: "kv", RATE_LIMIT_CONSISTENCY: "local-first" } as const;
  assert.equal(loadConfig(recordEnv({ ...localFirst, RATE_LIMIT: "10000" })).ok, true);
});

Deno.test("local-first on a KV file keeps a limit above 8000 (the VM recipe's store)", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kv-local-first-" });
  const store = await openRateLimitStore(configOf({
    RATE_LIMIT_STORE: "kv",
    RATE_LIMIT_CONSISTENCY: "local-first",
    RATE_LIMIT: "10000",
    KV_PATH: `${dir}/limits.sqlite3`,
  }));
  try {
    const now = Date.now();
    let admitted = 0;
    for (let i = 0; i < 10_001; i++) if ((await store.hit("198.51.100.7", now)).allowed) admitted++;
    assert.equal(admitted, 10_000);
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("openRateLimitStore builds the memory store unguarded", async () => {
  const store = await openRateLimitStore(configOf({}));
  try {
    assert.ok(store instanceof MemoryStore);
  } finally {
    await store.close();
  }
});

Deno.test("openRateLimitStore builds a guarded KV store on KV_PATH", async () => {
  const dir = await Deno.makeTempDir();
  const store = await openRateLimitStore(
    configOf({ RATE_LIMIT_STORE: "kv", KV_PATH: `${dir}/limit.sqlite3`, RATE_LIMIT: "2" }),
  );
  try {
    assert.ok(store instanceof GuardedStore);
    const now = Date.now();
    assert.equal((await store.hit("a", now)).remaining, 1);
    assert.equal((await store.hit("a", now)).remaining, 0);
    assert.equal((await store.hit("a", now)).allowed, false);
    assert.ok((await Deno.stat(`${dir}/limit.sqlite3`)).isFile);
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("openRateLimitStore builds a local-first KV store that answers every caller at once and shares the hits; a new instance reads the window before it serves", async () => {
  const dir = await Deno.makeTempDir();
  const env = {
    RATE_LIMIT_STORE: "kv",
    KV_PATH: `${dir}/limit.sqlite3`,
    RATE_LIMIT: "3",
    RATE_LIMIT_CONSISTENCY: "local-first",
    RATE_LIMIT_SYNC_MS: "10",
  } as const;
  const first = await openRateLimitStore(configOf(env));
  let second: Awaited<ReturnType<typeof openRateLimitStore>> | undefined;
  try {
    // Stamped by the KV clock (lib/limit/clock/steady_clock.ts), the local-first store is wrapped.
    assert.equal(typeof (first as { sync?: unknown }).sync, "function", "a local-first store");
    const now = Date.now();
    const decision = first.hit("a", now);
    assert.ok(
      !(decision instanceof Promise),
      "a new caller's decision does not wait for the store",
    );
    assert.equal(decision.remaining, 2);
    assert.equal((await first.hit("a", now)).remaining, 1);
    await (first as unknown as { sync(): Promise<void> }).sync();
    // Opened after the first one's hits reached the store: its first exchange read them.
    second = await openRateLimitStore(configOf(env));
    assert.equal((await second.hit("a", now)).remaining, 0);
    assert.equal((await second.hit("a", now)).allowed, false, "3 admitted across both: the limit");
  } finally {
    await first.close();
    await second?.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the sqlite store is local-first by default, refuses exact, and requires a file SQLITE_PATH", () => {
  const errorsOf = (env: Partial<Record<EnvName, string>>) => {
    const result = loadConfig(recordEnv(env));
    return result.ok ? [] : result.errors;
  };
  const config = configOf({ RATE_LIMIT_STORE: "sqlite", SQLITE_PATH: "/tmp/hits.sqlite3" });
  assert.equal(config.rateLimitConsistency, "local-first");
  assert.equal(config.sqlitePath, "/tmp/hits.sqlite3");
  assert.deepEqual(errorsOf({ RATE_LIMIT_STORE: "sqlite" }), [
    "SQLITE_PATH is required with RATE_LIMIT_STORE=sqlite: the file every instance on this machine shares (e.g. SQLITE_PATH=/var/lib/discovery/hits.sqlite3)",
  ]);
  assert.match(
    errorsOf({ RATE_LIMIT_STORE: "sqlite", SQLITE_PATH: "/x", RATE_LIMIT_CONSISTENCY: "exact" })
      .join(),
    /^RATE_LIMIT_CONSISTENCY must be local-first \(or unset\) with RATE_LIMIT_STORE=sqlite/,
  );
  for (const path of [":memory:", "file:hits?mode=memory", "/tmp/a\nb", "/".repeat(4097)]) {
    assert.match(
      errorsOf({ RATE_LIMIT_STORE: "sqlite", SQLITE_PATH: path }).join(),
      /^SQLITE_PATH must be a file path of at most 4096 characters/,
      JSON.stringify(path.slice(0, 20)),
    );
  }
  // Other stores keep exact as their default.
  assert.equal(configOf({ SQLITE_PATH: ":memory:" }).rateLimitConsistency, "exact");
});

Deno.test("openRateLimitStore builds a local-first SQLite store that shares the hits; a new instance reads the window before it serves", async () => {
  const dir = await Deno.makeTempDir();
  const env = {
    RATE_LIMIT_STORE: "sqlite",
    SQLITE_PATH: `${dir}/hits.sqlite3`,
    RATE_LIMIT: "3",
    RATE_LIMIT_SYNC_MS: "10",
  } as const;
  const first = await openRateLimitStore(configOf(env));
  let second: Awaited<ReturnType<typeof openRateLimitStore>> | undefined;
  try {
    const now = Date.now();
    const decision = first.hit("a", now);
    assert.ok(!(decision instanceof Promise), "a decision does not wait for the store");
    assert.equal(decision.remaining, 2);
    assert.equal((await first.hit("a", now)).remaining, 1);
    await (first as unknown as { sync(): Promise<void> }).sync();
    second = await openRateLimitStore(configOf(env));
    assert.equal((await second.hit("a", now)).remaining, 0);
    assert.equal((await second.hit("a", now)).allowed, false, "3 admitted across both: the limit");
  } finally {
    await first.close();
    await second?.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("openRateLimitStore says in one sentence why the SQLite file cannot be opened", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const missing = `${dir}/no/such/folder/hits.sqlite3`;
    await assert.rejects(
      openRateLimitStore(configOf({ RATE_LIMIT_STORE: "sqlite", SQLITE_PATH: missing })),
      (error: Error) => {
        assert.equal(
          error.message,
          `Cannot open SQLITE_PATH ${missing}: its folder ${dir}/no/such/folder does not exist, so create it or set SQLITE_PATH to a file in one`,
        );
        return true;
      },
    );
    const notDb = `${dir}/not_a_database`;
    await Deno.writeTextFile(notDb, "x".repeat(4096));
    await assert.rejects(
      openRateLimitStore(configOf({ RATE_LIMIT_STORE: "sqlite", SQLITE_PATH: notDb })),
      /^Error: Cannot open SQLITE_PATH .*: it is not a SQLite database/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("openRateLimitStore starts on an unreachable Redis and answers by policy", async () => {
  const port = freePort();
  const incidents: unknown[] = [];
  const store = await openRateLimitStore(
    configOf({
      RATE_LIMIT_STORE: "redis",
      REDIS_URL: `redis://127.0.0.1:${port}`,
      RATE_LIMIT_STORE_TIMEOUT_MS: "1000",
      RATE_LIMIT_ON_STORE_ERROR: "closed",
    }),
    { onIncident: (incident) => incidents.push(incident) },
  );
  try {
    // Every failed call is answered by the policy; the breaker reports the outage once it is sustained.
    for (let i = 0; i < BREAKER_DEFAULTS.minFailures; i++) {
      assert.equal((await store.hit("a", Date.now())).unavailable, true);
    }
    assert.equal(incidents.length, 1);
  } finally {
    await store.close();
  }
});
