/**
 * A writer process of the hit log contract's two-process case on Redis: connects to the URL given as
 * its first argument, with the key prefix given as its second, and runs `hitLogWriterMain` with the
 * JSON arguments given as its third.
 *
 * @module
 */

import { createRedisClient } from "../../../lib/limit/redis/redis_client.ts";
import { RedisHitLog } from "../../../lib/limit/redis/redis_hit_log.ts";
import { type HitLogWriterArgs, hitLogWriterMain } from "../_hit_log_contract.ts";

const [url, prefix, json] = Deno.args;
if (url === undefined || prefix === undefined || json === undefined) {
  throw new Error("usage: <redis url> <key prefix> <writer args as JSON>");
}
await hitLogWriterMain(JSON.parse(json) as HitLogWriterArgs, async (instance, windowMs) => {
  const client = createRedisClient(url);
  await client.ready(2000);
  return new RedisHitLog(client, windowMs, { prefix, instance, ownsClient: true, marginMs: 250 });
});
