/**
 * The store contract: one table of cases (admit, count, reset time, expiry, 429 not counted, peek does
 * not count) run against every store (memory, Deno KV, Redis) with an injected clock, so that the
 * service behaves the same whichever store an operator picks. Redis decides by its own clock (`TIME`)
 * in service; here by the injected one (`callerClock`): the server's cannot be set (a Redis under
 * libfaketime does not start), and `tests/limit/clock/store_clock_test.ts` runs it by `TIME`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { MemoryStore } from "../../lib/limit/memory/memory_store.ts";
import {
  type Decision,
  type RateLimitPolicy,
  type RateLimitStore,
} from "../../lib/limit/core/decision.ts";
import { KvStore } from "../../lib/limit/kv/kv_store.ts";
import { openRedisStore } from "../../lib/limit/redis/redis_store.ts";
import { redisUnavailableReason, startCluster, startRedis } from "../_redis.ts";

const POLICY: RateLimitPolicy = { limit: 3, windowMs: 10_000 };
const T0 = 1_700_000_000_000;

type Step = ["hit" | "peek", caller: string, atMs: number, expected: Decision];

interface Case {
  name: string;
  steps: Step[];
}

const ok = (remaining: number, resetSeconds: number): Decision => ({
  allowed: true,
  remaining,
  resetSeconds,
});
/** A hit's refusal carries its exact reset in ms (`resetMs`, what the memo holds it by); a peek's none. */
const refused = (resetSeconds: number, resetMs?: number): Decision => ({
  allowed: false,
  remaining: 0,
  resetSeconds,
  ...(resetMs === undefined ? {} : { resetMs }),
});

const CASES: Case[] = [
  {
    name: "admits a first request with limit - 1 remaining and the whole window as reset",
    steps: [["hit", "a", 0, ok(2, 10)]],
  },
  {
    name: "counts each admitted request and resets when the oldest leaves",
    steps: [["hit", "a", 0, ok(2, 10)], ["hit", "a", 1000, ok(1, 9)], ["hit", "a", 2500, ok(0, 8)]],
  },
  {
    name: "refuses the request past the limit, reset until the oldest leaves the window",
    steps: [
      ["hit", "a", 0, ok(2, 10)],
      ["hit", "a", 1000, ok(1, 9)],
      ["hit", "a", 2000, ok(0, 8)],
      ["hit", "a", 3000, refused(7, 7000)],
    ],
  },
  {
    name: "counts requests of the same millisecond separately",
    steps: [
      ["hit", "a", 0, ok(2, 10)],
      ["hit", "a", 0, ok(1, 10)],
      ["hit", "a", 0, ok(0, 10)],
      ["hit", "a", 0, refused(10, 10_000)],
    ],
  },
  {
    name: "does not count a refused request",
    steps: [
      ["hit", "a", 0, ok(2, 10)],
      ["hit", "a", 1000, ok(1, 9)],
      ["hit", "a", 2000, ok(0, 8)],
      ["hit", "a", 3000, refused(7, 7000)],
      ["hit", "a", 9000, refused(1, 1000)],
      // Only the request at 0 has left: had the refusals counted, this would be refused too.
      ["hit", "a", 10_001, ok(0, 1)],
    ],
  },
  {
    name: "forgets a request exactly one window after it (expiry)",
    steps: [
      ["hit", "a", 0, ok(2, 10)],
      ["hit", "a", 0, ok(1, 10)],
      ["hit", "a", 0, ok(0, 10)],
      ["hit", "a", 9999, refused(1, 1)],
      ["hit", "a", 10_000, ok(2, 10)],
    ],
  },
  {
    name: "peek reports a full quota over the whole window for an unknown caller (never t=0)",
    steps: [["peek", "a", 0, ok(3, 10)]],
  },
  {
    name: "peek reports without counting",
    steps: [
      ["hit", "a", 0, ok(2, 10)],
      ["peek", "a", 500, ok(2, 10)],
      ["peek", "a", 600, ok(2, 10)],
      ["hit", "a", 1000, ok(1, 9)],
      ["hit", "a", 2000, ok(0, 8)],
      ["peek", "a", 2500, refused(8)],
      ["peek", "a", 10_000, ok(1, 1)],
    ],
  },
  {
    name: "keeps callers apart",
    steps: [
      ["hit", "a", 0, ok(2, 10)],
      ["hit", "a", 0, ok(1, 10)],
      ["hit", "a", 0, ok(0, 10)],
      ["hit", "b", 0, ok(2, 10)],
      ["hit", "a", 1, refused(10, 9999)],
      ["peek", "b", 1, ok(2, 10)],
    ],
  },
];

/** Runs every case on fresh callers of `store` (a unique prefix per case keeps shared stores apart). */
async function runContract(t: Deno.TestContext, store: RateLimitStore): Promise<void> {
  for (const [index, c] of CASES.entries()) {
    await t.step(c.name, async () => {
      const prefix = `${crypto.randomUUID()}-${index}-`;
      for (const [i, [op, caller, at, expected]] of c.steps.entries()) {
        const decision = await store[op](prefix + caller, T0 + at);
        assert.deepEqual(decision, expected, `step ${i + 1}: ${op} ${caller} at +${at} ms`);
      }
    });
  }
}

Deno.test("memory store keeps the store contract", async (t) => {
  const store = new MemoryStore(POLICY, { sweep: false });
  try {
    await runContract(t, store);
  } finally {
    store.close();
  }
});

Deno.test("kv store keeps the store contract", async (t) => {
  const store = new KvStore(await Deno.openKv(":memory:"), POLICY, { ownsKv: true });
  try {
    await runContract(t, store);
  } finally {
    store.close();
  }
});

const noRedis = redisUnavailableReason();
Deno.test({
  name: `redis store keeps the store contract${noRedis ? ` (ignored: ${noRedis})` : ""}`,
  ignore: noRedis !== undefined,
  async fn(t) {
    const redis = await startRedis();
    const store = await openRedisStore(redis.url, POLICY, { callerClock: true });
    try {
      await runContract(t, store);
    } finally {
      await store.close();
      await redis.stop();
    }
  },
});

Deno.test({
  name: `redis store keeps the store contract on a cluster (3 primaries)${
    noRedis ? ` (ignored: ${noRedis})` : ""
  }`,
  ignore: noRedis !== undefined,
  async fn(t) {
    // Without replicas: the contract is about routing each caller's log to its slot, not failover.
    await using cluster = await startCluster({ replicas: 0 });
    const store = await openRedisStore({ type: "cluster", urls: cluster.urls }, POLICY, {
      callerClock: true,
    });
    try {
      await runContract(t, store);
    } finally {
      await store.close();
    }
  },
});
