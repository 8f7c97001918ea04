/**
 * A shared hit log that survives a bad peer (issue 39): real service processes in `local-first`
 * over a real Redis stream, a real Deno KV file or a real SQLite file (the hit log of Node's VM
 * recipe), with the log written to as an operator's worst day would: an instance whose clock is a
 * day ahead (libfaketime; KV and SQLite), a well-formed batch from a third writer stamped a day
 * ahead, an entry that cannot be read (Redis, KV and SQLite). Each must cost at most
 * one window for one caller (a future stamp) or that entry (an unreadable one), and say so once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createClient } from "@redis/client";
import { DatabaseSync } from "node:sqlite";
import { HitWriter } from "../lib/limit/local_first/hit_codec.ts";
import { redisUnavailableReason, startRedis } from "./_redis.ts";
import {
  admitted,
  burst,
  faketimeUnavailableReason,
  resetOf,
  sequential,
  type ServiceProcess,
  startService,
} from "./_service_process.ts";

const LIMIT = 60;
/** A short window, so that "after the window has passed" is seconds away. */
const WINDOW_S = 5;
const DAY_MS = 86_400_000;

const redisSkip = redisUnavailableReason();
const faketimeSkip = faketimeUnavailableReason();

const base = {
  RATE_LIMIT: String(LIMIT),
  RATE_LIMIT_WINDOW_SECONDS: String(WINDOW_S),
  RATE_LIMIT_CONSISTENCY: "local-first",
  RATE_LIMIT_SYNC_MS: "50",
  TRUSTED_PROXIES: "127.0.0.1",
  // Generous: on a busy test machine a slow answer must not be mistaken for an outage.
  RATE_LIMIT_STORE_TIMEOUT_MS: "5000",
};

/** Polls `check` every 50 ms until it holds, at most `timeoutMs`. */
async function until(check: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The events of `service` whose message matches `pattern`. */
const said = (service: ServiceProcess, pattern: RegExp) =>
  service.events.filter((e) => pattern.test(String(e.message)));

/** The warning about entries not trusted, of `cause`. */
const untrusted = (service: ServiceProcess, cause: string) =>
  service.events.filter((e) =>
    e.level === "warn" && /entries not trusted/.test(String(e.message)) && e.cause === cause
  );

/** The wait for another instance's hits to arrive: many times `D` at a 50 ms sync on loopback. */
const SETTLE_MS = 1000;
const settle = () => new Promise((resolve) => setTimeout(resolve, SETTLE_MS));

/** A well-formed batch of `count` hits of `ip` at `time`, as another writer would pack it. */
function batchOf(ip: string, count: number, time: number): Uint8Array {
  const writer = new HitWriter(64 * 1024);
  for (let i = 0; i < count; i++) assert.ok(writer.append(ip, time));
  return writer.take();
}

/** The `r=` of `RateLimit` a CORS preflight of `ip` gets from `url`: a peek, nothing counted. */
async function remainingOf(url: string, ip: string): Promise<number> {
  const response = await fetch(`${url}/api/v1/platform`, {
    method: "OPTIONS",
    headers: {
      "x-forwarded-for": ip,
      origin: "https://example.org",
      "access-control-request-method": "GET",
    },
  });
  await response.body?.cancel();
  return Number(/;r=(\d+)/.exec(response.headers.get("ratelimit") ?? "")?.[1]);
}

/** Waits until `url` has counted the others' hits of `ip`: `remaining` left, at most 15 s. */
async function untilRemaining(url: string, ip: string, remaining: number): Promise<void> {
  const deadline = Date.now() + 15_000;
  let now = await remainingOf(url, ip);
  while (now !== remaining) {
    assert.ok(Date.now() < deadline, `${url} has ${now} left for ${ip}, not ${remaining}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    now = await remainingOf(url, ip);
  }
}

async function stopAll(services: readonly ServiceProcess[]): Promise<void> {
  await Promise.allSettled(services.map((service) => service.stop()));
}

/** The two stores of a file on one machine: Deno KV's, and the SQLite hit log (Node's recipe). */
const FILE_STORES = [
  {
    name: "KV",
    env: (dir: string) => ({ RATE_LIMIT_STORE: "kv", KV_PATH: `${dir}/limits.sqlite3` }),
  },
  {
    name: "SQLite",
    env: (dir: string) => ({ RATE_LIMIT_STORE: "sqlite", SQLITE_PATH: `${dir}/hits.sqlite3` }),
  },
];

for (const store of FILE_STORES) {
  Deno.test({
    name:
      `a ${store.name} instance whose clock is a day ahead holds a caller for no more than a window, and it is the one that says so${
        faketimeSkip ? ` (ignored: ${faketimeSkip})` : ""
      }`,
    ignore: faketimeSkip !== undefined,
    async fn() {
      const dir = await Deno.makeTempDir();
      const env = { ...base, ...store.env(dir) };
      const services: ServiceProcess[] = [];
      try {
        // Two healthy instances (a majority to tell whose clock is wrong) and one a day ahead.
        const first = await startService(env);
        services.push(first);
        const [second, ahead] = await Promise.all([
          startService(env),
          startService(env, undefined, { faketime: "+1d" }),
        ]);
        services.push(second, ahead);
        // Each instance admits something, so that the others see its stamps.
        await sequential(first.url, 3, "198.51.100.1");
        await sequential(second.url, 3, "198.51.100.2");
        // The caller of the issue: 10 requests to the instance a day ahead.
        assert.equal(admitted(await sequential(ahead.url, 10, "192.0.2.10")), 10);
        // Its 10 hits are counted, at the healthy instance's now: 50 of 60 in this window...
        // Waited for (a preflight peeks), then sent at once: after a fixed second, 60 requests one
        // after the other on a busy machine once admitted 53, the hits having arrived late or left
        // the window.
        await untilRemaining(first.url, "192.0.2.10", LIMIT - 10);
        assert.equal(admitted(await burst([first.url], 60, "192.0.2.10")), 50);
        // ... and none of them after it: the window has passed.
        await new Promise((resolve) => setTimeout(resolve, WINDOW_S * 1000 + 1500));
        assert.equal(
          admitted(await sequential(first.url, 60, "192.0.2.10")),
          60,
          "the hits of the instance a day ahead held the caller past the window",
        );
        // The wrong clock is the one that says so; the healthy ones name it, and never blame
        // themselves.
        await until(
          () => said(ahead, /this instance's clock is .* ahead of 2 of its 2 peers'/).length > 0,
          "the instance a day ahead to say its clock is ahead",
        );
        await until(
          () => said(first, /another instance's clock disagrees/).length > 0,
          "a healthy instance to name the one ahead",
        );
        for (const healthy of [first, second]) {
          assert.deepEqual(
            said(healthy, /this instance's clock is/),
            [],
            "a healthy one blamed itself",
          );
        }
        assert.ok(untrusted(first, "future").length === 1, "the clamped hits are warned once");
      } finally {
        await stopAll(services);
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}

Deno.test({
  name:
    `Redis: a forged batch stamped a day ahead holds its caller for at most a window, and is warned${
      redisSkip ? ` (ignored: ${redisSkip})` : ""
    }`,
  ignore: redisSkip !== undefined,
  async fn() {
    const redis = await startRedis();
    const env = { ...base, RATE_LIMIT_STORE: "redis", REDIS_URL: redis.url };
    const services: ServiceProcess[] = [];
    const writer = createClient({ url: redis.url });
    try {
      services.push(...await Promise.all([startService(env), startService(env)]));
      const [a, b] = services as [ServiceProcess, ServiceProcess];
      await writer.connect();
      // A third writer appends 60 hits of one caller stamped a day ahead.
      const forged = batchOf("192.0.2.20", 60, Date.now() + DAY_MS).toBase64();
      await writer.xAdd("rate_limit:{hitlog}", "*", { i: "forger", s: "0", h: forged });
      await settle();
      const refused = await sequential(a.url, 20, "192.0.2.20");
      // Counted at now (60 hits): refused for this window, never beyond it.
      for (const outcome of refused) {
        assert.ok(
          resetOf(outcome) <= WINDOW_S + 1,
          `held until ${resetOf(outcome)} s from now, past one window`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, WINDOW_S * 1000 + 1500));
      assert.equal(admitted(await sequential(a.url, 10, "192.0.2.20")), 10);
      assert.equal(admitted(await sequential(b.url, 10, "192.0.2.20")), 10);
      for (const service of services) {
        assert.equal(untrusted(service, "future").length, 1, "the future stamps warned once");
      }
    } finally {
      await writer.close().catch(() => {});
      await stopAll(services);
      await redis.stop();
    }
  },
});

Deno.test({
  name:
    `Redis: an unreadable entry in the stream costs that entry: every instance syncs on past it${
      redisSkip ? ` (ignored: ${redisSkip})` : ""
    }`,
  ignore: redisSkip !== undefined,
  async fn() {
    const redis = await startRedis();
    const env = { ...base, RATE_LIMIT_STORE: "redis", REDIS_URL: redis.url };
    const services: ServiceProcess[] = [];
    const writer = createClient({ url: redis.url });
    try {
      services.push(...await Promise.all([startService(env), startService(env)]));
      const [a, b] = services as [ServiceProcess, ServiceProcess];
      await writer.connect();
      // Hits that are not base64, and an entry without the fields of a batch.
      await writer.xAdd("rate_limit:{hitlog}", "*", { i: "x", s: "0", h: "not base64!" });
      await writer.xAdd("rate_limit:{hitlog}", "*", { note: "no batch here" });
      await settle();
      for (const [ip, pause] of [["192.0.2.30", 0], ["192.0.2.31", 3000]] as const) {
        await new Promise((resolve) => setTimeout(resolve, pause));
        assert.equal(admitted(await sequential(a.url, LIMIT, ip)), LIMIT);
        await settle();
        assert.equal(admitted(await sequential(b.url, LIMIT, ip)), 0, `${ip}: the limit twice`);
      }
      for (const service of services) {
        assert.deepEqual(said(service, /rate-limit sync failing/), [], "a sync failed");
        assert.equal(untrusted(service, "unreadable").length, 1, "warned once per episode");
      }
    } finally {
      await writer.close().catch(() => {});
      await stopAll(services);
      await redis.stop();
    }
  },
});

Deno.test("Deno KV: an unreadable entry costs that entry, is counted and warned once", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/limits.sqlite3`;
  const env = { ...base, RATE_LIMIT_STORE: "kv", KV_PATH: path };
  const services: ServiceProcess[] = [];
  const kv = await Deno.openKv(path);
  try {
    services.push(...await Promise.all([startService(env), startService(env)]));
    const [a, b] = services as [ServiceProcess, ServiceProcess];
    // A value that is not bytes, then bytes that are not a batch, as a writer's batches 0 and 1.
    await kv.set(["hit_log", "b", "x", 0], "not a batch");
    await kv.set(["hit_log", "b", "x", 1], Uint8Array.of(9, 9, 9));
    await kv.set(["hit_log", "w", "x"], 1);
    await settle();
    assert.equal(admitted(await sequential(a.url, LIMIT, "192.0.2.40")), LIMIT);
    await settle();
    assert.equal(admitted(await sequential(b.url, LIMIT, "192.0.2.40")), 0, "the limit twice");
    for (const service of services) {
      assert.equal(untrusted(service, "unreadable").length, 1, "warned once per episode");
    }
  } finally {
    kv.close();
    await stopAll(services);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("SQLite: an unreadable row costs that row, is counted and warned once", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/hits.sqlite3`;
  const env = { ...base, RATE_LIMIT_STORE: "sqlite", SQLITE_PATH: path };
  const services: ServiceProcess[] = [];
  try {
    services.push(...await Promise.all([startService(env), startService(env)]));
    const [a, b] = services as [ServiceProcess, ServiceProcess];
    // Text where bytes belong, then bytes that are not a batch, as a writer's batches 0 and 1.
    const db = new DatabaseSync(path);
    const insert = db.prepare("INSERT INTO hit_log (instance, seq, at, hits) VALUES (?, ?, ?, ?)");
    insert.run("x", 0, Date.now(), "not a batch");
    insert.run("x", 1, Date.now(), Uint8Array.of(9, 9, 9));
    db.close();
    await settle();
    assert.equal(admitted(await sequential(a.url, LIMIT, "192.0.2.41")), LIMIT);
    await settle();
    assert.equal(admitted(await sequential(b.url, LIMIT, "192.0.2.41")), 0, "the limit twice");
    for (const service of services) {
      assert.equal(untrusted(service, "unreadable").length, 1, "warned once per episode");
    }
  } finally {
    await stopAll(services);
    await Deno.remove(dir, { recursive: true });
  }
});
