/**
 * Several real service processes sharing one store (a Deno KV file; a Redis): a concurrent burst of
 * one caller spread across them admits exactly the limit, and another caller is unaffected. And a Redis
 * outage in the middle of traffic: each process applies its failure policy, nothing answers 5xx, and
 * limiting resumes when Redis is back, without restarting anything.
 *
 * @module
 */

import assert from "node:assert/strict";
import { redisUnavailableReason, startRedis, type TestRedis } from "./_redis.ts";
import {
  burst,
  type Outcome,
  request,
  type ServiceProcess,
  startService,
} from "./_service_process.ts";

const LIMIT = 20;
const BASE_ENV = {
  RATE_LIMIT: String(LIMIT),
  RATE_LIMIT_WINDOW_SECONDS: "600",
  TRUSTED_PROXIES: "127.0.0.1",
  // Generous: on a busy test machine a slow answer must not be mistaken for an outage.
  RATE_LIMIT_STORE_TIMEOUT_MS: "5000",
  RATE_LIMIT_ON_STORE_ERROR: "closed",
};

function tally(outcomes: readonly Outcome[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const o of outcomes) {
    const key = o.code ? `${o.status} ${o.code}` : String(o.status);
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

async function assertSharedLimit(services: readonly ServiceProcess[]): Promise<void> {
  const urls = services.map((s) => s.url);
  const outcomes = await burst(urls, LIMIT * 3, "192.0.2.10");
  assert.deepEqual(tally(outcomes), { "200": LIMIT, "429 rate_limited": LIMIT * 2 });
  const later = await burst(urls, services.length, "192.0.2.10");
  assert.deepEqual(
    tally(later),
    { "429 rate_limited": services.length },
    "still limited everywhere",
  );
  const other = await request(urls[1]!, "192.0.2.20");
  assert.equal(other.status, 200, "another caller is unaffected");
  assert.equal(other.rateLimit, `"default";r=${LIMIT - 1};t=600`);
}

async function stopAll(services: readonly ServiceProcess[]): Promise<void> {
  await Promise.all(services.map((s) => s.stop()));
}

Deno.test("three processes on one KV file admit exactly the limit of a concurrent burst", async () => {
  const dir = await Deno.makeTempDir();
  const env = { ...BASE_ENV, RATE_LIMIT_STORE: "kv", KV_PATH: `${dir}/rate_limit.sqlite3` };
  // Started one after another: the first creates the database file.
  const services = [await startService(env)];
  services.push(...await Promise.all([startService(env), startService(env)]));
  try {
    await assertSharedLimit(services);
  } finally {
    await stopAll(services);
    await Deno.remove(dir, { recursive: true });
  }
});

const noRedis = redisUnavailableReason();
const ignored = noRedis ? ` (ignored: ${noRedis})` : "";

Deno.test({
  name: `three processes on one Redis admit exactly the limit of a concurrent burst${ignored}`,
  ignore: noRedis !== undefined,
  async fn() {
    const redis = await startRedis();
    const env = { ...BASE_ENV, RATE_LIMIT_STORE: "redis", REDIS_URL: redis.url };
    let services: ServiceProcess[] = [];
    try {
      services = await Promise.all([startService(env), startService(env), startService(env)]);
      await assertSharedLimit(services);
    } finally {
      await stopAll(services);
      await redis.stop();
    }
  },
});

/** Polls `check` until it holds, at most `timeoutMs`; integration tests wait on real processes. */
async function eventually(check: () => Promise<boolean>, timeoutMs: number, what: string) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function incidents(service: ServiceProcess, fragment: string): number {
  return service.events.filter((e) => String(e.message).includes(fragment)).length;
}

Deno.test({
  name: `a Redis outage applies each policy without a 5xx, and limiting resumes after it${ignored}`,
  ignore: noRedis !== undefined,
  async fn() {
    const redis: TestRedis = await startRedis();
    const env = {
      ...BASE_ENV,
      RATE_LIMIT: "5",
      RATE_LIMIT_STORE: "redis",
      REDIS_URL: redis.url,
      RATE_LIMIT_STORE_TIMEOUT_MS: "500",
    };
    let services: ServiceProcess[] = [];
    try {
      services = await Promise.all([
        startService({ ...env, RATE_LIMIT_ON_STORE_ERROR: "open" }),
        startService({ ...env, RATE_LIMIT_ON_STORE_ERROR: "closed" }),
      ]);
      const [open, closed] = services as [ServiceProcess, ServiceProcess];

      // Traffic runs through the whole outage; no answer may be a 5xx.
      const seen: Outcome[] = [];
      let running = true;
      const traffic = (async () => {
        for (let i = 0; running; i++) {
          seen.push(await request((i % 2 ? open : closed).url, `198.51.100.${i % 200}`));
        }
      })();

      assert.deepEqual(tally(await burst([open.url, closed.url], 6, "192.0.2.30")), {
        "200": 5,
        "429 rate_limited": 1,
      });

      await redis.stop();
      const duringOpen = await burst([open.url], 10, "192.0.2.31");
      const duringClosed = await burst([closed.url], 10, "192.0.2.31");
      assert.deepEqual(tally(duringOpen), { "200": 10 }, "fail open admits");
      assert.equal(duringOpen[0]!.rateLimit, '"default";r=4;t=600');
      assert.deepEqual(tally(duringClosed), { "429 rate_limit_unavailable": 10 }, "fail closed");
      assert.equal(incidents(open, "store unavailable"), 1, "logged once per incident");
      assert.equal(incidents(closed, "store unavailable"), 1, "logged once per incident");

      await redis.start();
      await eventually(
        async () => (await request(closed.url, "192.0.2.32")).code !== "rate_limit_unavailable",
        10_000,
        "the closed service counts again",
      );
      await eventually(
        async () => {
          await request(open.url, "192.0.2.33");
          return incidents(open, "store recovered") === 1;
        },
        10_000,
        "the open service counts again",
      );
      assert.deepEqual(tally(await burst([open.url, closed.url], 6, "192.0.2.34")), {
        "200": 5,
        "429 rate_limited": 1,
      }, "limiting resumed across both processes");
      assert.equal(incidents(closed, "store recovered"), 1);

      running = false;
      await traffic;
      assert.ok(seen.length > 0);
      assert.deepEqual(seen.filter((o) => o.status >= 500), [], "no 5xx at any time");
    } finally {
      await stopAll(services);
      await redis.stop();
    }
  },
});
