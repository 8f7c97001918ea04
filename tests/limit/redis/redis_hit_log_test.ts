/**
 * The Redis hit log of `local-first` on a real Redis: batches appended by one instance reach the
 * others once, never their writer; a process that starts reads the last window; a batch sent again
 * with its number is kept once; a replay longer than one read is read on; what left the window is
 * trimmed by the server's clock. And the contract every hit log keeps (`_hit_log_contract.ts`), on
 * one real Redis, each case under a key prefix of its own.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createClient } from "@redis/client";
import type { LogBatch } from "../../../lib/limit/core/hit_log.ts";
import { createRedisClient } from "../../../lib/limit/redis/redis_client.ts";
import { READ_COUNT, RedisHitLog } from "../../../lib/limit/redis/redis_hit_log.ts";
import { redisUnavailableReason, startRedis, type TestRedis } from "../../_redis.ts";
import { testHitLogContract } from "../_hit_log_contract.ts";

const skip = redisUnavailableReason();

function batch(instance: string, seq: number, ...bytes: number[]): LogBatch {
  return { instance, seq, hits: Uint8Array.from(bytes) };
}

const shape = (batches: LogBatch[]) => batches.map((b) => [b.instance, b.seq, [...b.hits]]);

Deno.test({
  name: `RedisHitLog keeps the HitLog contract on a real Redis${skip ? ` (skipped: ${skip})` : ""}`,
  ignore: skip !== undefined,
  async fn(t) {
    const redis = await startRedis();
    const open = async (windowMs = 60_000) => {
      const client = createRedisClient(redis.url);
      await client.ready(2000);
      return new RedisHitLog(client, windowMs, { ownsClient: true });
    };
    const logs: RedisHitLog[] = [];
    try {
      const a = await open();
      const b = await open();
      logs.push(a, b);
      await t.step(
        "one exchange appends and reads the others' batches since the last one, in order",
        async () => {
          assert.deepEqual(await b.exchange(null), []);
          assert.deepEqual(await a.exchange(batch("a", 0, 1, 2)), []);
          assert.deepEqual(await a.exchange(batch("a", 1, 3)), [], "its own never come back");
          assert.deepEqual(shape(await b.exchange(batch("b", 0, 9))), [["a", 0, [1, 2]], ["a", 1, [
            3,
          ]]]);
          assert.deepEqual(shape(await b.exchange(null)), [], "none twice");
          assert.deepEqual(shape(await a.exchange(null)), [["b", 0, [9]]]);
          assert.equal(a.roundTrips, 3);
        },
      );
      await t.step("a batch sent again with its number is kept once", async () => {
        await a.exchange(batch("a", 2, 7));
        await a.exchange(batch("a", 2, 7));
        assert.deepEqual(shape(await b.exchange(null)), [["a", 2, [7]]]);
      });
      await t.step("a process that starts reads the whole window, every writer's", async () => {
        const c = await open();
        logs.push(c);
        assert.deepEqual(shape(await c.exchange(null)), [
          ["a", 0, [1, 2]],
          ["a", 1, [3]],
          ["b", 0, [9]],
          ["a", 2, [7]],
        ]);
      });
      await t.step(
        "a replay of more batches than one read takes is read on in further round trips",
        async () => {
          for (let i = 0; i < READ_COUNT + 20; i++) await a.exchange(batch("a", 3 + i, i & 255));
          const d = await open();
          logs.push(d);
          const read = await d.exchange(null);
          assert.equal(read.length, 4 + READ_COUNT + 20);
          assert.equal(d.roundTrips, 2);
        },
      );
      await t.step(
        "the keys share one hash tag and expire a window after the last append",
        async () => {
          const check = createClient({ url: redis.url });
          await check.connect();
          try {
            const keys = (await check.keys("rate_limit:*")).toSorted();
            assert.deepEqual(keys, ["rate_limit:{hitlog}", "rate_limit:{hitlog}:seq"]);
            const ttl = await check.pTTL("rate_limit:{hitlog}");
            assert.ok(ttl > 60_000 && ttl <= 65_000, `ttl ${ttl}`);
          } finally {
            await check.close();
          }
        },
      );
      await t.step(
        "a stream that now ends before the cursor (a failover to a replica behind) moves the cursor back",
        async () => {
          const check = createClient({ url: redis.url });
          await check.connect();
          try {
            await b.exchange(null); // b's cursor: the stream's last entry, at this second
            await check.del("rate_limit:{hitlog}");
            const b64 = (n: number) => Uint8Array.of(n).toBase64();
            await check.xAdd("rate_limit:{hitlog}", "1000-0", { i: "w", s: "0", h: b64(1) });
            assert.deepEqual(shape(await b.exchange(null)), [], "nothing after the cursor");
            await check.xAdd("rate_limit:{hitlog}", "2000-0", { i: "w", s: "1", h: b64(2) });
            assert.deepEqual(shape(await b.exchange(null)), [["w", 1, [2]]]);
          } finally {
            await check.close();
          }
        },
      );
      await t.step(
        "what left the window is not replayed (trimmed by the server's clock)",
        async () => {
          const short = await open(200);
          logs.push(short);
          await short.exchange(batch("s", 0, 1));
          await new Promise((resolve) => setTimeout(resolve, 5400));
          const late = await open(200);
          logs.push(late);
          assert.deepEqual(
            shape((await late.exchange(null)).filter((b) => b.instance === "s")),
            [],
          );
        },
      );
    } finally {
      await Promise.all(logs.map((log) => log.close()));
      await redis.stop();
    }
  },
});

const WRITER = new URL("./_redis_hit_log_writer.ts", import.meta.url).pathname;
/** The margin the contract's logs keep past the window, in ms (short: the expiry case waits it). */
const MARGIN_MS = 250;
/** One Redis for every case of the contract, started by the first. */
let shared: Promise<TestRedis> | undefined;
let cases = 0;

testHitLogContract({
  name: "RedisHitLog",
  skip,
  replayMarginMs: MARGIN_MS + 50,
  async newStore() {
    shared ??= startRedis();
    const redis = await shared;
    const prefix = `contract${cases++}:`;
    const clients: Array<{ close(): Promise<void> }> = [];
    return {
      async open(instances, windowMs) {
        return await Promise.all(instances.map(async (instance) => {
          const client = createRedisClient(redis.url);
          await client.ready(2000);
          return new RedisHitLog(client, windowMs, {
            prefix,
            instance,
            ownsClient: true,
            marginMs: MARGIN_MS,
          });
        }));
      },
      writerCommand: (args) =>
        new Deno.Command(Deno.execPath(), {
          args: ["run", "-A", WRITER, redis.url, prefix, JSON.stringify(args)],
          stdout: "piped",
          stderr: "piped",
        }),
      async close() {
        await Promise.all(clients.map((client) => client.close()));
      },
    };
  },
});

// The contract's cases share one Redis: stopped once they are all done.
Deno.test({
  name: `RedisHitLog: the contract's Redis stops${skip ? ` (skipped: ${skip})` : ""}`,
  ignore: skip !== undefined,
  async fn() {
    if (shared !== undefined) await (await shared).stop();
  },
});
