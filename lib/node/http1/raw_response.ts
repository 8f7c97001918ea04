/**
 * Writes a handler's `Response` straight onto a socket, then closes it: for the answers Node's HTTP
 * server does not write itself, where there is no `ServerResponse` (a request its parser refused,
 * `client_error.ts`; a CONNECT, whose socket Node hands over, `connect.ts`). As Node writes its own:
 * the status line, the response's fields as the handler made them, `date`, `connection: close` (the
 * parser cannot go on after a refusal, nor take a CONNECT's socket back), and `content-length`.
 *
 * Then the connection is torn down as RFC 9112 section 9.6 asks: the server's side closed first,
 * the client's bytes read and dropped until it closes its side, and the socket destroyed then, or
 * after {@linkcode LINGER_MS}. Node's own refusals destroy the socket; left to the client, one that
 * kept its side open held a socket for good, and every stop (Node's `server.close()` waits for each
 * connection) until its deadline.
 *
 * @module
 */

import { STATUS_CODES } from "node:http";
import type { Socket } from "node:net";

/**
 * How long a socket answered here is kept, in ms, for the client to read the answer and close its
 * side: several round trips on any path a client reaches the service by (a continent apart is about
 * 150 ms), so a client that behaves sees the answer, not a reset; and no longer than the stop's drain
 * (`DRAIN_MS`, 1 s), so a client that never closes delays a stop by no more than that.
 */
export const LINGER_MS = 1000;

/** Options of {@linkcode writeRawResponse}. */
export interface RawResponseOptions {
  /** The status line's version: the request's, as Deno answers an HTTP/1.0 request in HTTP/1.0. */
  version: "1.0" | "1.1";
  /** Whether the request was HEAD: the fields, and no body. */
  head: boolean;
}

/**
 * The bytes of `response` as an HTTP/1.x message that closes its connection.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const bytes = await rawResponseBytes(new Response("hi", { status: 404 }), { version: "1.1", head: false });
 * const text = new TextDecoder().decode(bytes);
 * assert.match(text, /^HTTP\/1\.1 404 Not Found\r\n/);
 * assert.match(text, /\r\nconnection: close\r\ncontent-length: 2\r\n\r\nhi$/);
 * ```
 */
export async function rawResponseBytes(
  response: Response,
  options: RawResponseOptions,
): Promise<Uint8Array> {
  const body = response.body === null ? undefined : new Uint8Array(await response.arrayBuffer());
  let head = `HTTP/${options.version} ${response.status} ${
    STATUS_CODES[response.status] ?? "Unknown"
  }\r\n`;
  for (const [name, value] of response.headers) {
    if (name !== "connection" && name !== "date") head += `${name}: ${value}\r\n`;
  }
  head += `date: ${new Date().toUTCString()}\r\nconnection: close\r\n`;
  // A HEAD answer carries its GET's length among its own fields; a body its own.
  if (body !== undefined) head += `content-length: ${body.length}\r\n`;
  head += "\r\n";
  const headBytes = new TextEncoder().encode(head);
  if (body === undefined || options.head) return headBytes;
  const bytes = new Uint8Array(headBytes.length + body.length);
  bytes.set(headBytes);
  bytes.set(body, headBytes.length);
  return bytes;
}

/**
 * Writes `response` on `socket`, ends it, and destroys it once the client has closed its side, or
 * after {@linkcode LINGER_MS}; a socket that can no longer be written is destroyed at once.
 */
export async function writeRawResponse(
  socket: Socket,
  response: Response,
  options: RawResponseOptions,
): Promise<void> {
  const bytes = await rawResponseBytes(response, options);
  if (socket.destroyed || !socket.writable) {
    socket.destroy();
    return;
  }
  socket.end(bytes);
  lingerThenDestroy(socket);
}

/**
 * Reads and drops what the client still sends, so that the socket's input is empty when it is
 * closed (an unread byte would make the close a reset, which can take the answer with it), until
 * the client closes its side: Node then destroys the socket itself, its answer written (a stream
 * whose two sides have ended is destroyed). A client that does not close is cut off after
 * {@linkcode LINGER_MS}.
 */
function lingerThenDestroy(socket: Socket): void {
  const linger = setTimeout(() => socket.destroy(), LINGER_MS);
  // A stop is not held by the timer: the socket is (Node's `server.close()` waits for it).
  linger.unref();
  socket.once("close", () => clearTimeout(linger));
  socket.resume();
}
