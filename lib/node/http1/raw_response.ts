/**
 * Writes a handler's `Response` straight onto a socket, then closes it: for the answers Node's HTTP
 * server does not write itself, where there is no `ServerResponse` (a request its parser refused,
 * `client_error.ts`; a CONNECT, whose socket Node hands over, `connect.ts`). As Node writes its own:
 * the status line, the response's fields as the handler made them, `date`, `connection: close` (the
 * parser cannot go on after a refusal, nor take a CONNECT's socket back), and `content-length`.
 *
 * @module
 */

import { STATUS_CODES } from "node:http";
import type { Socket } from "node:net";

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

/** Writes `response` on `socket` and ends it; a socket already gone is left alone. */
export async function writeRawResponse(
  socket: Socket,
  response: Response,
  options: RawResponseOptions,
): Promise<void> {
  const bytes = await rawResponseBytes(response, options);
  if (socket.destroyed || !socket.writable) return;
  socket.end(bytes);
}
