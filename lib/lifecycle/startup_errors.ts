/**
 * Start-up failures as one sentence each, whatever the runtime: what could not be done, the
 * variable or permission involved, and the fix. The entry says the sentence and exits 1, so an
 * operator never reads a stack trace for a problem of configuration or deployment. Deno names its
 * errors by class (`AddrInUse`...), Node by code (`EADDRINUSE`...): each case reads both. Imported
 * only when a start fails (lib/README.md, "Cold start").
 *
 * @module
 */

import { errorCodeOf, messageOf, namedMessageOf } from "../text/error_message.ts";

/** Where the service was asked to listen. */
export interface ListenTarget {
  /** `HOSTNAME`. */
  hostname: string;
  /** `PORT`, or `HEALTH_PORT`'s value for the operator port. */
  port: number;
  /** The variable that named the port: `PORT` by default. */
  portVariable?: "PORT" | "HEALTH_PORT";
}

/** Whether `error` is Deno's error class `name` or carries one of Node's `codes`. */
function is(error: unknown, name: string, codes: readonly string[] = []): boolean {
  const code = errorCodeOf(error);
  return (error instanceof Error && error.name === name) ||
    (code !== undefined && codes.includes(code));
}

/**
 * Explains why listening on `target` failed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const onNode = Object.assign(new Error("listen EADDRINUSE"), { code: "EADDRINUSE" });
 * const onDeno = Object.assign(new Error("Address in use"), { name: "AddrInUse" });
 * for (const error of [onNode, onDeno]) {
 *   const sentence = explainListenError(error, { hostname: "0.0.0.0", port: 8000 });
 *   assert.match(sentence, /PORT 8000 is already in use/);
 * }
 * const health = { hostname: "0.0.0.0", port: 8081, portVariable: "HEALTH_PORT" } as const;
 * assert.match(explainListenError(onNode, health), /set HEALTH_PORT to a free port/);
 * ```
 */
export function explainListenError(error: unknown, target: ListenTarget): string {
  const where = `Cannot listen on ${target.hostname}:${target.port}`;
  const port = target.portVariable ?? "PORT";
  let reason: string;
  if (is(error, "AddrInUse", ["EADDRINUSE"])) {
    reason =
      `${port} ${target.port} is already in use, so stop the process holding it or set ${port} to a free port`;
  } else if (is(error, "AddrNotAvailable", ["EADDRNOTAVAIL", "ENOTFOUND", "EAI_AGAIN"])) {
    reason =
      `HOSTNAME ${target.hostname} is not an address of this machine, so set HOSTNAME to one of its addresses, 0.0.0.0 or ::`;
  } else if (is(error, "NotCapable")) {
    reason = "this process may not use the network, so grant --allow-net (deno task start does)";
  } else if (is(error, "", ["ERR_ACCESS_DENIED"])) {
    reason =
      "this process may not use the network under Node's permission model, so run it with --allow-net or without --permission";
  } else if (is(error, "PermissionDenied", ["EACCES", "EPERM"])) {
    reason =
      `this user may not bind ${port} ${target.port}, so set ${port} to 1024 or above or grant the capability CAP_NET_BIND_SERVICE`;
  } else if (is(error, "NotSupported")) {
    reason = `${
      messageOf(error)
    }, so add it to the command (deno task start and the compiled binary pass it) or unset REUSE_PORT`;
  } else {
    reason = `${messageOf(error)}, so check HOSTNAME and ${port}`;
  }
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
  if (is(error, "NotCapable") && /env access/.test(messageOf(error))) {
    return "Cannot read the configuration: this process may not read environment variables, so grant --allow-env (deno task start does); nothing is served.";
  }
  return `Cannot start: ${namedMessageOf(error)}; nothing is served.`;
}
