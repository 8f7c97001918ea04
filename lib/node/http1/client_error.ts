/**
 * What Node's entry answers when Node's HTTP parser refuses a request (the server's `clientError`
 * event), so that Node gives the answer Deno gives (lib/node/README.md, "One answer per request"):
 *
 * - a method Node's parser does not know (`FOO`), and a `Content-Length` sent twice with one value:
 *   Deno serves both (the handler answers 501 to the first, RFC 9110 section 15.6.2; RFC 9112
 *   section 6.3 processes the second as that one value), so their head is read here
 *   (`raw_head.ts`) and answered by the handler, then the connection closed (the parser cannot go
 *   on);
 * - a head that did not arrive within Node's `headersTimeout`: 408 `request_timeout` if part of one
 *   came, and the connection closed without an answer if nothing came;
 * - any other refusal (a malformed head, one over 64 KiB): 400 `bad_request`, as Deno's parser
 *   answers it.
 *
 * The refusals are answered by the handler's `refuse` (lib/respond/refusal.ts): the Error body, the
 * caller's RateLimit fields where it is known, an access-log line. Node's own answers to them carry
 * neither and are not logged. Each is answered after the responses to the requests before it on its
 * connection (`in_flight.ts`), in the order they came, as Deno answers pipelined requests.
 *
 * @module
 */

import type { Socket } from "node:net";
import type { Handler } from "../../handler.ts";
import type { Refuse } from "../../respond/refusal.ts";
import { RawFields } from "./raw_fields.ts";
import { type RawHead, readRawHead } from "./raw_head.ts";
import { inBody, whenAnswered } from "./in_flight.ts";
import { writeRawResponse } from "./raw_response.ts";
import { peerOf } from "./peer.ts";
import { urlOf } from "./request_target.ts";

/** An error of Node's HTTP parser, as `clientError` gives it. */
export interface ClientError extends Error {
  /** `HPE_INVALID_METHOD`, `ERR_HTTP_REQUEST_TIMEOUT`, `ECONNRESET`... */
  code?: string;
  /** Where in `rawPacket` the parser stopped. */
  bytesParsed?: number;
  /** The bytes the parser was reading: one read from the socket. */
  rawPacket?: Uint8Array;
}

/** Options of {@linkcode createClientErrorListener}. */
export interface ClientErrorOptions {
  /** The service's handler and its answer to refused requests. */
  handler: Handler & { refuse: Refuse };
  /** The listener's authority, for a request that named no host (`fallbackAuthority`). */
  fallback: () => string;
  /** Receives a failure to answer. */
  onError: (error: unknown) => void;
}

/** The parser's refusals of a request Deno serves: its head is read here and handed to the handler. */
const SERVED_BY_DENO = new Set(["HPE_INVALID_METHOD", "HPE_UNEXPECTED_CONTENT_LENGTH"]);

/** Node's error when a head did not arrive within `headersTimeout` (or `requestTimeout`). */
const TIMEOUT = "ERR_HTTP_REQUEST_TIMEOUT";

/**
 * Creates the server's `clientError` listener. It answers once per connection: after a refusal,
 * Node's parser may report the next bytes of the same connection again.
 */
export function createClientErrorListener(
  options: ClientErrorOptions,
): (error: ClientError, socket: Socket) => void {
  const answered = new WeakSet<Socket>();
  return (error, socket) => {
    if (answered.has(socket)) return;
    answered.add(socket);
    // A connection that failed (ECONNRESET, EPIPE: not the parser's `HPE_` errors), or one that
    // sent nothing in time: nothing to answer, nothing to log.
    const parser = error.code?.startsWith("HPE_") === true || error.code === TIMEOUT;
    // Or one whose error is in the body of a request the handler answers (a chunk size that is not
    // hex, a body that never ends): a second answer would be one nobody asked for. Node's own
    // listener stays silent there too, once a response has begun.
    if (
      !parser || !socket.writable || (error.code === TIMEOUT && socket.bytesRead === 0) ||
      inBody(socket)
    ) {
      socket.destroy();
      return;
    }
    socket.pause();
    answer(error, socket, options).catch((failure) => {
      options.onError(failure);
      socket.destroy();
    });
  };
}

/**
 * Answers the refused request on `socket`, once the requests before it are answered: by the handler
 * if Deno serves it, else its refusal.
 */
async function answer(
  error: ClientError,
  socket: Socket,
  { handler, fallback }: ClientErrorOptions,
): Promise<void> {
  await whenAnswered(socket);
  const head = error.rawPacket === undefined
    ? undefined
    : readRawHead(error.rawPacket, error.bytesParsed ?? 0);
  const info = peerOf(socket);
  if (head === undefined) {
    const refused = await handler.refuse(refusalOf(error), undefined, info);
    return writeRawResponse(socket, refused, { version: "1.1", head: false });
  }
  const headers = new RawFields(head.fields);
  const url = urlOf(head.method, head.target, firstHost(head), fallback());
  if (url !== undefined && servedByDeno(error.code, head)) {
    const request = { method: head.method, url, headers } as unknown as Request;
    const response = await handler(request, info);
    return writeRawResponse(socket, response, {
      version: head.version,
      head: head.method === "HEAD",
    });
  }
  const read = { method: head.method, url, headers };
  const response = await handler.refuse(refusalOf(error), read, info);
  return writeRawResponse(socket, response, { version: "1.1", head: head.method === "HEAD" });
}

/** The refusal of a parser's error: late, or unreadable. */
function refusalOf(error: ClientError): "request_timeout" | "bad_request" {
  return error.code === TIMEOUT ? "request_timeout" : "bad_request";
}

/**
 * Whether Deno's parser serves the request Node's refused with `code`: any method that is a token
 * (the handler answers 501 to one it does not recognise), and a `Content-Length` repeated with one
 * value of digits and no `Transfer-Encoding` (libs/http_h1/parse.rs, `observe_content_length`).
 */
function servedByDeno(code: string | undefined, head: RawHead): boolean {
  if (code === undefined || !SERVED_BY_DENO.has(code)) return false;
  if (code === "HPE_INVALID_METHOD") return true;
  const lengths = new Set<string>();
  for (let i = 0; i < head.fields.length; i += 2) {
    const name = head.fields[i]!.toLowerCase();
    if (name === "transfer-encoding") return false;
    if (name === "content-length") lengths.add(head.fields[i + 1]!);
  }
  return lengths.size === 1 && /^\d+$/.test([...lengths][0]!);
}

/** The first `Host` value, as Node's `headers.host` keeps it. */
function firstHost(head: RawHead): string | undefined {
  for (let i = 0; i < head.fields.length; i += 2) {
    if (head.fields[i]!.toLowerCase() === "host") return head.fields[i + 1];
  }
  return undefined;
}
