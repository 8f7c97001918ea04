/**
 * Start-up failures on Node as one sentence each, as Deno's entry says them (`lib/server/startup.ts`):
 * what could not be done, the variable involved, and the fix.
 *
 * @module
 */

import { messageOf, namedMessageOf } from "../text/error_message.ts";

/** Where the service was asked to listen. */
export interface ListenTarget {
  /** `HOSTNAME`. */
  hostname: string;
  /** `PORT`. */
  port: number;
}

/** Node's system error code of `error` (`EADDRINUSE`...), if it has one. */
export function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/**
 * Explains why listening on `target` failed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const taken = Object.assign(new Error("listen EADDRINUSE"), { code: "EADDRINUSE" });
 * const sentence = explainListenError(taken, { hostname: "0.0.0.0", port: 8000 });
 * assert.match(sentence, /PORT 8000 is already in use/);
 * ```
 */
export function explainListenError(error: unknown, target: ListenTarget): string {
  const where = `Cannot listen on ${target.hostname}:${target.port}`;
  const code = codeOf(error);
  const reason = code === "EADDRINUSE"
    ? `PORT ${target.port} is already in use, so stop the process holding it or set PORT to a free port`
    : code === "EADDRNOTAVAIL" || code === "ENOTFOUND" || code === "EAI_AGAIN"
    ? `HOSTNAME ${target.hostname} is not an address of this machine, so set HOSTNAME to one of its addresses, 0.0.0.0 or ::`
    : code === "EACCES" || code === "EPERM"
    ? `this user may not bind PORT ${target.port}, so set PORT to 1024 or above or grant the capability CAP_NET_BIND_SERVICE`
    : code === "ERR_ACCESS_DENIED"
    ? "this process may not use the network under Node's permission model, so run it with --allow-net or without --permission"
    : `${messageOf(error)}, so check HOSTNAME and PORT`;
  return `${where}: ${reason}; nothing is served.`;
}

/**
 * Explains a failure at start-up that no more specific explanation covers.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.match(explainStartupError(new Error("boom")), /^Cannot start: Error: boom; nothing is served\.$/);
 * ```
 */
export function explainStartupError(error: unknown): string {
  return `Cannot start: ${namedMessageOf(error)}; nothing is served.`;
}
