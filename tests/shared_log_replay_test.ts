/**
 * A large hit log at start (issue 39): a fresh `local-first` instance replays the last window of a
 * real Redis stream holding 200 full batches (8.7 million hits, about 70 MB of base64, one writer)
 * one chunk at a time, so its peak RSS stays within 256 MiB, and it listens by the replay's bound
 * (twice the sync timeout: 10 s here), whatever is left to read. The same instance's figures with an
 * empty log are measured beside it, in the same run.
 *
 * How fast the replay is depends on the machine (2.5-3 s when issue 39 was built, 6-10.5 s on a
 * later machine of the same kind, idle): the test holds the bound the service promises, the empty
 * log's first 200 plus the replay's bound plus one exchange of the sync loop, not a speed.
 *
 * The log is built by pipelining its 200 appends over one connection (the batches are packed here
 * by the service's own writer), not one request at a time. The service runs with the V8 flags it
 * ships with; the default cap of 500,000 callers holds the callers replayed (8.7 million distinct
 * addresses: the cap forgets the oldest), about 21 MiB of the peak.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createClient } from "@redis/client";
import { HitWriter } from "../lib/limit/local_first/hit_codec.ts";
import { REDIS_MAX_BATCH_BYTES } from "../lib/limit/redis/redis_hit_log.ts";
import { redisUnavailableReason, startRedis } from "./_redis.ts";
import { request, type ServiceProcess, startService } from "./_service_process.ts";

const BATCHES = 200;
const PEAK_BOUND_MIB = 256;
/** The sync timeout the instance runs with; the replay before listening takes at most twice it. */
const SYNC_TIMEOUT_MS = 5_000;
/** Beyond the replay's bound: the exchange in flight when it expires, which listening waits for. */
const LAST_EXCHANGE_MS = SYNC_TIMEOUT_MS;

const skip = redisUnavailableReason();

/**
 * The service as `deno task start` and `deno task compile` run it: with their V8 flags (a young
 * generation of 2 MiB, the heap grown by half), which is what bounds the garbage of a replay.
 */
const SERVED_AS = [
  "--v8-flags=--max-semi-space-size=2,--heap-growing-percent=50",
  "--unstable-net",
  "--allow-net",
  "--allow-read",
  "--allow-write",
  "--allow-env",
];

/** `BATCHES` full batches of distinct IPv4 callers, all stamped `time`, as base64. */
function fullBatches(time: number): { batches: string[]; hits: number } {
  const writer = new HitWriter(REDIS_MAX_BATCH_BYTES);
  const batches: string[] = [];
  let hits = 0;
  for (let n = 0; batches.length < BATCHES; n++) {
    const ip = `10.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
    if (writer.append(ip, time)) {
      hits++;
      continue;
    }
    batches.push(writer.take().toBase64());
    if (batches.length < BATCHES) {
      assert.ok(writer.append(ip, time));
      hits++;
    }
  }
  return { batches, hits };
}

/** Peak RSS of a process so far, MiB (`VmHWM`). */
async function peakMiB(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const kib = Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1]);
  return kib / 1024;
}

/** Starts an instance, and measures the time from spawn to its first 200 and its peak RSS. */
async function measure(env: Record<string, string>): Promise<{ firstMs: number; peak: number }> {
  const started = performance.now();
  const service: ServiceProcess = await startService(env, 60_000, { flags: SERVED_AS });
  try {
    const outcome = await request(service.url, "192.0.2.1");
    const firstMs = performance.now() - started;
    assert.equal(outcome.status, 200);
    // The peak of the replay and the warm-up (half a second after start): read past both.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    return { firstMs, peak: await peakMiB(service.pid) };
  } finally {
    await service.stop();
  }
}

Deno.test({
  name: `a fresh local-first instance replays 8.7 million hits of Redis in a chunk's memory${
    skip ? ` (ignored: ${skip})` : ""
  }`,
  ignore: skip !== undefined,
  async fn() {
    const redis = await startRedis();
    const client = createClient({ url: redis.url });
    try {
      const env = {
        RATE_LIMIT_STORE: "redis",
        REDIS_URL: redis.url,
        RATE_LIMIT_CONSISTENCY: "local-first",
        RATE_LIMIT_STORE_TIMEOUT_MS: String(SYNC_TIMEOUT_MS),
      };
      const empty = await measure(env);
      await client.connect();
      const { batches, hits } = fullBatches(Date.now());
      assert.ok(hits > 8_600_000, `${hits} hits`);
      // Pipelined: the client sends the 200 appends without waiting for each answer.
      await Promise.all(
        batches.map((h, s) =>
          client.xAdd("rate_limit:{hitlog}", "*", { i: "writer", s: String(s), h })
        ),
      );
      const large = await measure(env);
      const figures = `empty log: first 200 after ${empty.firstMs.toFixed(0)} ms, peak ${
        empty.peak.toFixed(0)
      } MiB; ${hits} hits (${BATCHES} batches): first 200 after ${
        large.firstMs.toFixed(0)
      } ms, peak ${large.peak.toFixed(0)} MiB`;
      // deno-lint-ignore no-console
      console.log(figures);
      assert.ok(large.peak <= PEAK_BOUND_MIB, `peak RSS above ${PEAK_BOUND_MIB} MiB: ${figures}`);
      const bound = empty.firstMs + 2 * SYNC_TIMEOUT_MS + LAST_EXCHANGE_MS;
      assert.ok(
        large.firstMs <= bound,
        `first 200 after the replay's bound (${bound} ms): ${figures}`,
      );
    } finally {
      await client.close().catch(() => {});
      await redis.stop();
    }
  },
});
