/**
 * A thread of the "opened together" case of sqlite_hit_log_test.ts: for each `{ path, at }` it is
 * sent, it waits (spinning, so that every thread starts within microseconds of the others) until
 * the wall clock reads `at`, opens the log at `path`, closes it, and answers the error's message,
 * or null when the opening succeeded.
 *
 * @module
 */

import { parentPort } from "node:worker_threads";
import { SqliteHitLog } from "../../../lib/limit/sqlite/sqlite_hit_log.ts";

parentPort!.on("message", ({ path, at }: { path: string; at: number }) => {
  while (Date.now() < at) {
    // The barrier: a timer would start the threads milliseconds apart.
  }
  try {
    SqliteHitLog.open(path, 60_000, { instance: crypto.randomUUID() }).close();
    parentPort!.postMessage(null);
  } catch (error) {
    parentPort!.postMessage(error instanceof Error ? error.message : String(error));
  }
});
