/**
 * A Redis connection that dies silently (no FIN or RST: a NAT or firewall entry dropped, a VM paused,
 * a cable pulled), on a real `redis-server` behind a TCP proxy that freezes: the connections open at
 * that moment stay open at both ends and carry nothing more, while new ones are forwarded as usual.
 *
 * Before `redis_client.ts` judged a connection by its silence, the client kept sending every call
 * down the dead connection until the kernel gave up on it (about 15 minutes of retransmissions with
 * Linux's defaults; never here, where the proxy's end still acknowledges): `local-first` started no
 * exchange again (the one in flight never settled) and `exact` answered by policy throughout. Each
 * test waits at most {@linkcode GIVE_UP_MS} for the store to come back, so the old code fails
 * rather than hangs.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { RateLimitStore } from "../../../lib/limit/core/decision.ts";
import type { SyncIncident } from "../../../lib/limit/local_first/local_first_store.ts";
import { openRateLimitStore } from "../../../lib/limit/open_store.ts";
import { SILENT_CONNECTION_MS } from "../../../lib/limit/redis/redis_client.ts";
import { startLatencyProxy } from "../../_latency_proxy.ts";
import { redisCli, redisUnavailableReason, startRedis } from "../../_redis.ts";
import { type EnvRecord, testConfig } from "../../_server.ts";

const unavailable = redisUnavailableReason();

/** How long a test waits for the store to answer again after the freeze. */
const GIVE_UP_MS = 15_000;

/**
 * The bound stated in `redis_client.ts` at the default store timeout (100 ms): the silence, two
 * checks 250 ms apart, then a new connection and the next call (a sync 50 ms later, a probe of the
 * failed store 250 ms later), with a second of slack for a busy two-core machine.
 */
const RESUME_BOUND_MS = SILENT_CONNECTION_MS + 500 + 1500;

function open(env: EnvRecord, onSyncIncident?: (incident: SyncIncident) => void) {
  return openRateLimitStore(
    testConfig({ RATE_LIMIT_STORE: "redis", RATE_LIMIT: "60", ...env }),
    onSyncIncident ? { onSyncIncident } : {},
  );
}

/** Polls `check` every 50 ms until it holds; resolves to the ms it took, or undefined after `ms`. */
async function within(ms: number, check: () => Promise<boolean>): Promise<number | undefined> {
  const started = performance.now();
  while (performance.now() - started < ms) {
    if (await check()) return performance.now() - started;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return undefined;
}

/** Resolves to whether `promise` settled within `ms`. */
async function settles(promise: unknown, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), ms));
  const done = Promise.resolve(promise).then(() => true, () => true);
  const settled = await Promise.race([done, late]);
  clearTimeout(timer);
  return settled;
}

async function remaining(store: RateLimitStore, caller: string): Promise<number> {
  return (await store.peek(caller, Date.now())).remaining;
}

Deno.test({
  name: `local-first: exchanges resume within ${RESUME_BOUND_MS} ms after the connection froze` +
    (unavailable ? ` (skipped: ${unavailable})` : ""),
  ignore: unavailable !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
}, async () => {
  await using _redis = { ...(await startRedis()), [Symbol.asyncDispose]: () => _redis.stop() };
  await using proxy = startLatencyProxy(_redis.port, 0);
  const incidents: SyncIncident[] = [];
  const env = { RATE_LIMIT_CONSISTENCY: "local-first", RATE_LIMIT_SYNC_MS: "50" };
  // A reaches Redis through the proxy; B, the other instance, directly.
  const a = await open(
    { ...env, REDIS_URL: `redis://127.0.0.1:${proxy.port}` },
    (i) => incidents.push(i),
  );
  const b = await open({ ...env, REDIS_URL: _redis.url });
  try {
    await b.hit("192.0.2.1", Date.now());
    assert.ok(
      await within(5000, async () => await remaining(a, "192.0.2.1") === 59),
      "before the freeze, B's hit reaches A",
    );
    assert.ok(proxy.freeze() >= 1, "A's connection is frozen");
    await b.hit("192.0.2.2", Date.now());
    const took = await within(GIVE_UP_MS, async () => await remaining(a, "192.0.2.2") === 59);
    // deno-lint-ignore no-console
    console.log(
      `local-first: B's hit reached A ${took?.toFixed(0) ?? "never"} ms after the freeze`,
    );
    assert.ok(took !== undefined, `A received nothing for ${GIVE_UP_MS} ms after the freeze`);
    assert.ok(took < RESUME_BOUND_MS, `A resumed after ${took} ms, over ${RESUME_BOUND_MS}`);
    assert.deepEqual(incidents.map((i) => i.kind), ["unsynced", "resynced"]);
    // A stopping instance (SIGTERM) whose connection froze still stops: its flush gives up.
    assert.ok(proxy.freeze() >= 1, "A's new connection is frozen");
    await a.hit("192.0.2.3", Date.now());
    const started = performance.now();
    assert.ok(await settles(a.close(), GIVE_UP_MS), `A's close() took over ${GIVE_UP_MS} ms`);
    // deno-lint-ignore no-console
    console.log(
      `local-first: close() with a frozen connection took ${
        (performance.now() - started).toFixed(0)
      } ms`,
    );
  } finally {
    await b.close();
    // Bounded: the code before this test's fix waits on a dead connection's replies for good.
    await proxy.close();
    await settles(a.close(), GIVE_UP_MS);
  }
});

Deno.test({
  name: `exact: decisions come from Redis again within ${RESUME_BOUND_MS} ms after the freeze` +
    (unavailable ? ` (skipped: ${unavailable})` : ""),
  ignore: unavailable !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
}, async () => {
  await using _redis = { ...(await startRedis()), [Symbol.asyncDispose]: () => _redis.stop() };
  await using proxy = startLatencyProxy(_redis.port, 0);
  const store = await open({ REDIS_URL: `redis://127.0.0.1:${proxy.port}`, RATE_LIMIT: "1000" });
  const caller = "198.51.100.1";
  try {
    for (let i = 0; i < 3; i++) await store.hit(caller, Date.now());
    assert.equal(await remaining(store, caller), 997, "decided by Redis before the freeze");
    assert.ok(proxy.freeze() >= 1);
    // A request every 50 ms: the failure policy (open) answers a fresh window, 999 left; Redis
    // counts on from 997 (the requests sent into the frozen connection never reached it).
    const took = await within(
      GIVE_UP_MS,
      async () => (await store.hit(caller, Date.now())).remaining <= 996,
    );
    // deno-lint-ignore no-console
    console.log(`exact: Redis decided again ${took?.toFixed(0) ?? "never"} ms after the freeze`);
    assert.ok(took !== undefined, `no decision came from Redis for ${GIVE_UP_MS} ms`);
    assert.ok(
      took < RESUME_BOUND_MS,
      `Redis decided again after ${took} ms, over ${RESUME_BOUND_MS}`,
    );
  } finally {
    await proxy.close();
    await settles(store.close(), GIVE_UP_MS);
  }
});

Deno.test({
  name: "an idle, healthy connection is kept: no call waits, so its silence is never judged" +
    (unavailable ? ` (skipped: ${unavailable})` : ""),
  ignore: unavailable !== undefined,
  sanitizeOps: false,
  sanitizeResources: false,
}, async () => {
  await using redis = { ...(await startRedis()), [Symbol.asyncDispose]: () => redis.stop() };
  const connections = async () =>
    Number(
      /total_connections_received:(\d+)/.exec(
        await redisCli(["-p", String(redis.port), "INFO", "stats"]),
      )?.[1],
    );
  const store = await open({ REDIS_URL: redis.url });
  try {
    assert.equal((await store.hit("203.0.113.1", Date.now())).remaining, 59);
    const before = await connections();
    await new Promise((resolve) => setTimeout(resolve, SILENT_CONNECTION_MS + 1000));
    assert.equal((await store.hit("203.0.113.1", Date.now())).remaining, 58);
    // One more: the second reading's own redis-cli.
    assert.equal(await connections(), before + 1, "no new connection after an idle spell");
  } finally {
    await store.close();
  }
});
