/**
 * The caller's address as the handler reads it (`PeerInfo`), from a Node socket: its peer, whose
 * `::ffff:`-mapped IPv4 the caller key unmaps.
 *
 * @module
 */

import type { Socket } from "node:net";
import type { PeerInfo } from "../../limit/caller/caller_key.ts";

/**
 * The peer of `socket`, or no address once the socket is gone (Node then reports none).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { Socket } from "node:net";
 * assert.deepEqual(peerOf(new Socket()), { remoteAddr: { transport: "none" } });
 * ```
 */
export function peerOf(socket: Socket): PeerInfo {
  const hostname = socket.remoteAddress;
  return {
    remoteAddr: hostname === undefined
      ? { transport: "none" }
      : { transport: "tcp", hostname, port: socket.remotePort ?? 0 },
  };
}
