/**
 * `messageOf`: a thrown value as the sentence to show or log, for the places that report an error
 * they caught (start-up failures, the build's checks, the static files' read).
 *
 * @module
 */

/**
 * The message of `error` when it is an `Error`, else the value as a string (a `throw` may throw
 * anything).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(messageOf(new TypeError("bad port")), "bad port");
 * assert.equal(messageOf("plain"), "plain");
 * ```
 */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
