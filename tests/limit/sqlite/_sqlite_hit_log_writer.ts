/**
 * A writer process of the hit log contract's two-process case on a SQLite file: opens the file
 * given as its first argument and runs `hitLogWriterMain` with the JSON arguments given as its
 * second.
 *
 * @module
 */

import { SqliteHitLog } from "../../../lib/limit/sqlite/sqlite_hit_log.ts";
import { type HitLogWriterArgs, hitLogWriterMain } from "../_hit_log_contract.ts";

const [path, json] = Deno.args;
if (path === undefined || json === undefined) {
  throw new Error("usage: <sqlite file> <writer args as JSON>");
}
await hitLogWriterMain(
  JSON.parse(json) as HitLogWriterArgs,
  (instance, windowMs) =>
    Promise.resolve(SqliteHitLog.open(path, windowMs, { instance, marginMs: 250 })),
);
