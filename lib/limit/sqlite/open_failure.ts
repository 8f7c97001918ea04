/**
 * How the SQLite hit log says that `SQLITE_PATH` cannot be opened, apart from the log itself so
 * that an entry can tell that sentence from other failures without loading `node:sqlite`.
 *
 * @module
 */

/** How the sentence about `SQLITE_PATH` begins. */
export const SQLITE_OPEN_FAILURE = "Cannot open SQLITE_PATH";

/**
 * Whether `error` is the SQLite hit log's own sentence about `SQLITE_PATH`, which an entry prints
 * as it is rather than behind a generic "Cannot start".
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(isSqliteOpenFailure(new Error("Cannot open SQLITE_PATH /x: gone")), true);
 * assert.equal(isSqliteOpenFailure(new Error("boom")), false);
 * ```
 */
export function isSqliteOpenFailure(error: unknown): error is Error {
  return error instanceof Error && error.message.startsWith(SQLITE_OPEN_FAILURE);
}
