/**
 * A writer process of the hit log contract's two-process case on a Deno KV file: opens the file given
 * as its first argument and runs `hitLogWriterMain` with the JSON arguments given as its second.
 *
 * @module
 */

import { KvHitLog } from "../../../lib/limit/kv/kv_hit_log.ts";
import { type HitLogWriterArgs, hitLogWriterMain } from "../_hit_log_contract.ts";

const [path, json] = Deno.args;
if (path === undefined || json === undefined) {
  throw new Error("usage: <kv file> <writer args as JSON>");
}
await hitLogWriterMain(JSON.parse(json) as HitLogWriterArgs, async (instance, windowMs) => {
  const kv = await Deno.openKv(path);
  return new KvHitLog(kv, windowMs, { instance, ownsKv: true, marginMs: 250 });
});
