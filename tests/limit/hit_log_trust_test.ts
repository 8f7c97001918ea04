/**
 * The hit logs (`redis_hit_log.ts` on a real Redis, `kv_hit_log.ts` on a real SQLite file) against
 * entries they did not write (issue 39): an entry that cannot be read is skipped and counted and the
 * cursor moves past it; an entry cannot silence another writer (a number set by someone else, a
 * forged far number, a forged registry), or where it can, the log says so; a replay is read a chunk
 * at a time (`more`).
 *
 * @module
 */

import assert from "node:assert/strict";
import { createClient } from "@redis/client";
import { KvHitLog, REPLAY_BATCHES } from "../../lib/limit/kv/kv_hit_log.ts";
import type { LogBatch } from "../../lib/limit/core/hit_log.ts";
import { createRedisClient } from "../../lib/limit/redis/redis_client.ts";
import {
  EXCHANGE_BYTES,
  REDIS_MAX_BATCH_BYTES,
  RedisHitLog,
} from "../../lib/limit/redis/redis_hit_log.ts";
import { redisUnavailableReason, startRedis } from "../_redis.ts";

const skip = redisUnavailableReason();
const STREAM = "rate_limit:{hitlog}";

function batch(instance: string, seq: number, ...bytes: number[]): LogBatch {
  return { instance, seq, hits: Uint8Array.from(bytes) };
}

const names = (batches: LogBatch[]) => batches.map((b) => `${b.instance}#${b.seq}`);

Deno.test({
  name:
    `RedisHitLog skips what it cannot read, says when its numbers are moved, and reads a replay in chunks${
      skip ? ` (ignored: ${skip})` : ""
    }`,
  ignore: skip !== undefined,
  async fn(t) {
    const redis = await startRedis();
    const raw = createClient({ url: redis.url });
    const logs: RedisHitLog[] = [];
    const open = async (instance: string) => {
      const client = createRedisClient(redis.url);
      await client.ready(2000);
      const log = new RedisHitLog(client, 60_000, { ownsClient: true, instance });
      logs.push(log);
      return log;
    };
    try {
      await raw.connect();
      const [a, b] = [await open("a"), await open("b")];
      await t.step("an unreadable entry costs that entry: the cursor moves past it", async () => {
        await b.exchange(null);
        await raw.xAdd(STREAM, "*", { i: "x", s: "0", h: "not base64!" });
        await raw.xAdd(STREAM, "*", { other: "fields" });
        await raw.xAdd(STREAM, "*", { i: "x", s: "minus one", h: "AQ==" });
        await a.exchange(batch("a", 0, 1));
        assert.deepEqual(names(await b.exchange(null)), ["a#0"]);
        assert.equal(b.health.unreadable, 3);
        await a.exchange(batch("a", 1, 2));
        assert.deepEqual(names(await b.exchange(null)), ["a#1"], "read on past them");
        assert.equal(b.health.unreadable, 3, "each counted once");
      });
      await t.step(
        "a number set by another entry holds back no later batch, and is told",
        async () => {
          // Someone sets a's last number ahead: a's next batches must still land.
          await raw.hSet(`${STREAM}:seq`, "a", "1000000");
          await a.exchange(batch("a", 2, 3));
          await a.exchange(batch("a", 3, 4));
          assert.deepEqual(names(await b.exchange(null)), ["a#2", "a#3"]);
          // Set to the very number a sends next, it costs that one batch, and a says so.
          await raw.hSet(`${STREAM}:seq`, "a", "4");
          await a.exchange(batch("a", 4, 5));
          assert.equal(a.health.tampered, 1);
          assert.match(a.health.tamperedReason, /refused the first time/);
          // The same batch sent again (a timed-out exchange that landed) is kept once, untold.
          await a.exchange(batch("a", 5, 6));
          await a.exchange(batch("a", 5, 6));
          assert.deepEqual(names(await b.exchange(null)), ["a#5"]);
          assert.equal(a.health.tampered, 1);
        },
      );
      await t.step("a replay of large batches is read a chunk at a time", async () => {
        const big = new Uint8Array(REDIS_MAX_BATCH_BYTES).fill(7);
        const count = Math.ceil((3 * EXCHANGE_BYTES) / REDIS_MAX_BATCH_BYTES);
        for (let i = 0; i < count; i++) await a.exchange({ instance: "a", seq: 10 + i, hits: big });
        const c = await open("c");
        let read = 0;
        let exchanges = 0;
        do {
          const batches = await c.exchange(null);
          const bytes = batches.reduce((sum, x) => sum + x.hits.length, 0);
          assert.ok(bytes <= EXCHANGE_BYTES + REDIS_MAX_BATCH_BYTES, `${bytes} bytes at once`);
          read += batches.filter((x) => x.hits.length === REDIS_MAX_BATCH_BYTES).length;
          exchanges++;
        } while (c.more);
        assert.equal(read, count);
        assert.ok(exchanges >= 3, `${exchanges} exchanges`);
      });
      await t.step("a stream whose ids run ahead of the server's clock is told", async () => {
        await raw.xAdd(STREAM, `${Date.now() + 3_600_000}-0`, { i: "x", s: "9", h: "AQ==" });
        const before = b.health.tampered;
        await b.exchange(null);
        assert.equal(b.health.tampered, before + 1);
        assert.match(b.health.tamperedReason, /ahead of the server's clock/);
      });
    } finally {
      for (const log of logs) await log.close();
      await raw.close().catch(() => {});
      await redis.stop();
    }
  },
});

async function withKv(body: (path: string, kv: Deno.Kv) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "hit_log_trust_" });
  const kv = await Deno.openKv(`${dir}/log.sqlite3`);
  try {
    await body(`${dir}/log.sqlite3`, kv);
  } finally {
    kv.close();
    await Deno.remove(dir, { recursive: true });
  }
}

async function kvLog(path: string, instance: string): Promise<KvHitLog> {
  return new KvHitLog(await Deno.openKv(path), 60_000, { instance, ownsKv: true });
}

Deno.test("KvHitLog skips a value that is not bytes and counts it", () =>
  withKv(async (path, kv) => {
    const [a, b] = [await kvLog(path, "a"), await kvLog(path, "b")];
    try {
      await a.exchange(batch("a", 0, 1));
      await kv.set(["hit_log", "b", "x", 0], "not bytes");
      await kv.set(["hit_log", "w", "x"], 0);
      await kv.set(["hit_log", "w", "y"], "not a number");
      assert.deepEqual(names(await b.exchange(null)), ["a#0"]);
      assert.equal(b.health.unreadable, 2);
    } finally {
      a.close();
      b.close();
    }
  }));

Deno.test("KvHitLog: a forged batch at a far number or a forged registry silences no writer, and is told", () =>
  withKv(async (path, kv) => {
    const [a, b] = [await kvLog(path, "a"), await kvLog(path, "b")];
    try {
      await a.exchange(batch("a", 0, 1));
      assert.deepEqual(names(await b.exchange(null)), ["a#0"]);
      // A batch under a's id at a far number, with the registry moved to it.
      await kv.set(["hit_log", "b", "a", 1_000_000], Uint8Array.of(9));
      await kv.set(["hit_log", "w", "a"], 1_000_000);
      assert.deepEqual(names(await b.exchange(null)), []);
      assert.ok(b.health.tampered >= 1);
      assert.match(b.health.tamperedReason, /skip from 1 to 1000000/);
      // a's next batches are read all the same.
      await a.exchange(batch("a", 1, 2));
      await a.exchange(batch("a", 2, 3));
      assert.deepEqual(names(await b.exchange(null)), ["a#1", "a#2"]);
      // A registry named ahead of every batch moves no cursor past a's next one.
      await kv.delete(["hit_log", "b", "a", 1_000_000]);
      await kv.set(["hit_log", "w", "a"], 50);
      await b.exchange(null);
      await a.exchange(batch("a", 3, 4));
      assert.deepEqual(names(await b.exchange(null)), ["a#3"]);
    } finally {
      a.close();
      b.close();
    }
  }));

Deno.test("KvHitLog reads a replay a chunk at a time", () =>
  withKv(async (path) => {
    const a = await kvLog(path, "a");
    const count = 2 * REPLAY_BATCHES + 5;
    for (let seq = 0; seq < count; seq++) await a.exchange(batch("a", seq, seq & 255));
    const b = await kvLog(path, "b");
    try {
      const chunks: number[] = [];
      do chunks.push((await b.exchange(null)).length); while (b.more);
      assert.deepEqual(chunks, [REPLAY_BATCHES, REPLAY_BATCHES, 5]);
      assert.equal(b.health.tampered, 0);
    } finally {
      a.close();
      b.close();
    }
  }));
