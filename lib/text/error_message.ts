/**
 * A thrown value as text, for the places that report an error they caught: `messageOf` (start-up
 * failures, the build's checks, the static files' read), `namedMessageOf` with the error's name
 * (events, the stores' incidents, the Worker's log), `errorCodeOf` (a system error's code).
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

/**
 * `Name: message` when `error` is an `Error`, else the value as a string: what kind of failure it
 * was, for a log line or an event (never the stack).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(namedMessageOf(new TypeError("bad port")), "TypeError: bad port");
 * assert.equal(namedMessageOf(42), "42");
 * ```
 */
export function namedMessageOf(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/**
 * The system error code `error` carries (`EADDRINUSE`, `ERR_ACCESS_DENIED`: Node's, and Deno's
 * errors of its Node layer), if any.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(errorCodeOf(Object.assign(new Error("listen"), { code: "EADDRINUSE" })), "EADDRINUSE");
 * assert.equal(errorCodeOf(new Error("plain")), undefined);
 * assert.equal(errorCodeOf(null), undefined);
 * ```
 */
export function errorCodeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null | undefined)?.code;
  return typeof code === "string" ? code : undefined;
}
