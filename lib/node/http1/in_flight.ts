/**
 * The responses Node's HTTP server still owes on a connection, so that an answer written straight
 * onto its socket (a parser's refusal, `client_error.ts`; a CONNECT, `connect.ts`) comes after them,
 * in the order the requests came: a client that pipelines `GET /a` then `FOO /b` gets the GET's 200,
 * then the 501. Node's parser refuses `FOO` while the GET's handler is still waiting on its store (a
 * Redis, KV or Durable Object round trip); written at once and the socket ended, the 501 went first
 * and the 200 was lost.
 *
 * The server counts a request's response here ({@linkcode countResponse}) unless its bytes were
 * handed to the socket before the request's event returned (ended at once, and the socket's, not
 * queued behind another: what is written later comes after them), and the count drops as each
 * response closes; a raw answer waits ({@linkcode whenAnswered}) until none is left, or the
 * connection is gone. Most responses are ended at once (the memory store decides with no promise)
 * and cost no listener. It also notes the request whose body is still being read
 * ({@linkcode noteBody}): a parser error in that body is no request of its own ({@linkcode inBody}).
 *
 * @module
 */

import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";

/** The responses in flight on one connection, and the answers waiting for them. */
interface Flight {
  count: number;
  waiters: Array<() => void>;
}

/** Per connection; gone with its socket. */
const FLIGHTS = new WeakMap<Socket, Flight>();

/**
 * Counts `res` as in flight on `socket` until it closes: sent whole ('close' follows 'finish'), or
 * cut off with its connection. Call it before the request's event returns, for every response not
 * yet ended then or queued behind another on its socket.
 */
export function countResponse(socket: Socket, res: ServerResponse): void {
  let flight = FLIGHTS.get(socket);
  if (flight === undefined) {
    flight = { count: 0, waiters: [] };
    FLIGHTS.set(socket, flight);
  }
  flight.count++;
  const counted = flight;
  res.once("close", () => {
    if (--counted.count > 0) return;
    for (const waiter of counted.waiters.splice(0)) waiter();
  });
}

/**
 * Resolves once every response counted on `socket` has closed, or at once if none is in flight;
 * also once the socket closes (there is then nothing to write on).
 */
export function whenAnswered(socket: Socket): Promise<void> {
  const flight = FLIGHTS.get(socket);
  if (flight === undefined || flight.count === 0 || socket.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    flight.waiters.push(resolve);
    socket.once("close", () => resolve());
  });
}

/**
 * Per connection, the request whose body Node's parser was still reading when the server received
 * it (one with a `Content-Length` or chunks); gone with its socket.
 */
const BODIES = new WeakMap<Socket, IncomingMessage>();

/**
 * Notes `req` as the request of `socket` whose body is still to come, when it is (a request without
 * a body is complete on arrival, and costs nothing here). Call it where the server receives it.
 */
export function noteBody(socket: Socket, req: IncomingMessage): void {
  if (!req.complete) BODIES.set(socket, req);
}

/**
 * Whether a parser error on `socket` is in the body of a request the server has received (and so
 * has answered, or will): such an error is no request of its own, and gets no answer of its own.
 */
export function inBody(socket: Socket): boolean {
  const req = BODIES.get(socket);
  return req !== undefined && !req.complete;
}
