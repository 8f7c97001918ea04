/**
 * Node's request path from the handler's answer to the socket: the handler's {@linkcode Answer}
 * (every decision `fetch` makes, `handler.ts`) written with `writeHead` from its wire form
 * (`respond/wire.ts`: the status, the fields as one flat list, the body as bytes kept once per
 * template), with no `Response`, `Headers` or body stream built per request. Those objects cost Node
 * more than the rest of a request (tests/bench/README.md, "Node"), as Fastify and srvx know, who
 * build none either. What is sent is what Deno sends for the same answer, field for field and byte
 * for byte (tests/node/node_wire_test.ts), with Node's own `Date`, `Connection` and `Keep-Alive`.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import type { ServerResponse } from "node:http";
import type { PeerInfo } from "../limit/caller/caller_key.ts";
import type { ServiceHandler } from "../handler.ts";
import type { Answer, Wire } from "../respond/wire.ts";

/** What the fast path needs of the service's handler. */
export type AnswerSource = Pick<ServiceHandler, "answer" | "wire">;

/** Per-request facts of the server around the answer. */
export interface SendState {
  /** Whether the server drains: the answer then carries `Connection: close`. */
  readonly closing: boolean;
}

/**
 * Answers one request on `res` with `handler`'s answer: at once when the answer is ready (nearly
 * always: no promise, no microtask), once it resolves otherwise. A failure to send is handed to
 * `onError`, and the request answered 500 with no body if nothing was sent yet (the handler itself
 * answers its own failures with the Error shape).
 */
export function sendAnswer(
  handler: AnswerSource,
  request: Request,
  info: PeerInfo,
  res: ServerResponse,
  options: { state: SendState; onError: (error: unknown) => void },
): void {
  try {
    const answered = handler.answer(request, info);
    if (answered instanceof Promise) {
      answered.then(
        (ready) => write(handler.wire, res, ready, options),
        (error) => failed(res, error, options.onError),
      );
    } else {
      write(handler.wire, res, answered, options);
    }
  } catch (error) {
    failed(res, error, options.onError);
  }
}

/** Writes `answer` as its wire form: head and body in one `end`. */
function write(
  wire: Wire,
  res: ServerResponse,
  answer: Answer,
  options: { state: SendState; onError: (error: unknown) => void },
): void {
  try {
    const fields = wire.fields(answer);
    if (options.state.closing) fields.push("connection", "close");
    res.writeHead(answer.template.status, fields);
    // Node sends no body to HEAD whatever is given; HEAD's templates have none anyway.
    const body = wire.body(answer.template);
    res.end(body === null ? undefined : bufferOf(body));
  } catch (error) {
    failed(res, error, options.onError);
  }
}

/** The `Buffer` over each body's bytes (no copy), made once: Node converts a `Uint8Array` per write. */
const BUFFERS = new WeakMap<Uint8Array, Buffer>();

/** `bytes` as a `Buffer` sharing its memory, kept beside them. */
function bufferOf(bytes: Uint8Array): Buffer {
  let buffer = BUFFERS.get(bytes);
  if (buffer === undefined) {
    buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    BUFFERS.set(bytes, buffer);
  }
  return buffer;
}

/** Reports a failure to answer and ends the response: 500 when its head is not sent yet. */
function failed(res: ServerResponse, error: unknown, onError: (error: unknown) => void): void {
  onError(error);
  if (!res.headersSent) res.writeHead(500, { "content-length": "0" });
  res.end();
}
