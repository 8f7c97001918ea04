/**
 * The project's own adapter of a `fetch` handler to `node:http` (chosen by measurement over srvx and
 * `@hono/node-server`: tests/bench/README.md, "Node"), with what a public service needs around it:
 *
 * - each request as the handler reads it (its method, its URL from `Host` and the target, its
 *   fields' `get` and `has`: not a `Request` built by undici, the largest cost measured) and the
 *   socket's address as the caller's `PeerInfo`;
 * - each answer written as the handler's wire form, with no `Response` built (`fast_path.ts`);
 * - a drain: once {@linkcode NodeServer.drain} is called, every response carries `Connection: close`,
 *   so that busy keep-alive clients stop reusing their connections before the listener stops (the
 *   same rule as Deno's, `lib/server/listener.ts`);
 * - accept failures (EMFILE, "too many open files", which Node reports as the server's `error`
 *   event, its listener kept) reported once per incident, and the recovery after a second of
 *   connections accepted again;
 * - an idle keep-alive connection kept {@linkcode KEEP_ALIVE_TIMEOUT_MS}, longer than nginx keeps
 *   its idle upstream connections (60 s), where Node's default (5 s) would close connections nginx
 *   is about to reuse;
 * - the answer Deno gives to every request (lib/node/README.md): the request's URL as Deno builds it
 *   (`http1/request_target.ts`), heads up to Deno's 64 KiB and 128 fields, no `Host` and
 *   `Expect` left to the handler, the HTTP/1.0 status line to HTTP/1.0 (`http1/response_version.ts`),
 *   CONNECT answered (`http1/connect.ts`), and Node's parser's refusals answered by the handler
 *   (`http1/client_error.ts`), each after the responses to the requests before it on its
 *   connection (`http1/in_flight.ts`);
 * - a head that does not arrive within {@linkcode HEADERS_TIMEOUT_MS} refused, and its connection
 *   closed.
 *
 * @module
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Handler } from "../handler.ts";
import { createAcceptIncidents, type ListenerEvent } from "../lifecycle/listener_events.ts";
import type { PeerInfo } from "../limit/caller/caller_key.ts";
import type { ReadHead, Refuse } from "../respond/refusal.ts";
import { type AnswerSource, sendAnswer } from "./fast_path.ts";
import { type ClientErrorOptions, createClientErrorListener } from "./http1/client_error.ts";
import { createConnectListener } from "./http1/connect.ts";
import { countResponse, noteBody } from "./http1/in_flight.ts";
import { peerOf } from "./http1/peer.ts";
import { RawFields } from "./http1/raw_fields.ts";
import { MAX_FIELDS } from "./http1/raw_head.ts";
import { fallbackAuthority, urlOf } from "./http1/request_target.ts";
import { VersionedResponse } from "./http1/response_version.ts";

/**
 * How long an idle keep-alive connection is kept, in ms: above nginx's `keepalive_timeout` for its
 * upstream connections (60 s by default), so the proxy, not the service, closes an idle connection,
 * and never one it has just sent a request on.
 */
export const KEEP_ALIVE_TIMEOUT_MS = 65_000;

/**
 * How long a request's head may take to arrive, in ms: as long as the recipe's nginx gives a client
 * (`client_header_timeout 10s`, deploy/nginx.conf), where Node's 60 s (checked every 30 s) kept a
 * connection that sent nothing about 90 s. Deno's server has no such bound (lib/node/README.md).
 */
export const HEADERS_TIMEOUT_MS = 10_000;

/**
 * How long a whole request may take, body included, in ms (Node requires it at least the head's):
 * the service reads no body, and Node discards one after the answer, holding the connection.
 */
const REQUEST_TIMEOUT_MS = 30_000;

/** How often Node checks those two bounds, in ms (its default, 30 s, would let them overrun by that). */
const TIMEOUT_CHECK_MS = 1000;

/** The largest request head read, in bytes: Deno's (libs/http_h1/conn.rs, `MAX_HEAD_BYTES`). */
export const MAX_HEAD_BYTES = 64 * 1024;

/** Options of {@linkcode serveNode}. */
export interface NodeServeOptions {
  /** Interface to listen on. */
  hostname: string;
  /** Port to listen on; 0 picks a free one. */
  port: number;
  /** Lets another process listen on the same TCP port (`SO_REUSEPORT`, Linux). */
  reusePort?: boolean;
  /** Receives `listening`, then one `accept_failed` and one `recovered` per incident. */
  onEvent?: (event: ListenerEvent) => void;
  /** Receives an error the handler threw or a response that could not be sent. */
  onError?: (error: unknown) => void;
}

/** A server started by {@linkcode serveNode}. */
export interface NodeServer {
  /** `http://host:port/`. */
  readonly address: string;
  /** The port it listens on. */
  readonly port: number;
  /** Every response from now on carries `Connection: close`. */
  drain(): void;
  /**
   * Stops accepting, closes idle connections, and resolves once every open one has finished its
   * response and closed.
   */
  shutdown(): Promise<void>;
  /** Closes every connection at once (a stop past its deadline). */
  closeAll(): void;
}

/**
 * The service's handler as Node's entry uses it: its answer and the answer's wire form (written
 * with no `Response` built, `fast_path.ts`), its `fetch` and its answer to the requests Node's
 * parser refuses (`http1/client_error.ts`).
 */
export type NodeHandler = Handler & AnswerSource & { refuse: Refuse };

/** What each request is answered with: the handler, the drain's flag, the listener's authority. */
interface AnswerState {
  readonly handler: NodeHandler;
  closing: boolean;
  fallback: string;
}

/**
 * Serves `handler` on `hostname:port`; rejects with Node's error when it cannot listen (the port
 * taken, a permission), for the entry to say in one sentence.
 */
export async function serveNode(
  handler: NodeHandler,
  options: NodeServeOptions,
): Promise<NodeServer> {
  const state: AnswerState = { handler, closing: false, fallback: "localhost" };
  const onError = options.onError ?? (() => {});
  const server = createNodeServer(state, onError);
  await listen(server, options);
  const bound = server.address() as AddressInfo;
  state.fallback = fallbackAuthority(bound.address, bound.port);
  const address = `http://${
    bound.family === "IPv6" ? `[${bound.address}]` : bound.address
  }:${bound.port}/`;
  watchAccepts(server, options.onEvent ?? (() => {}));
  options.onEvent?.({ kind: "listening", address });
  return {
    address,
    port: bound.port,
    drain() {
      state.closing = true;
    },
    shutdown: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      }),
    closeAll: () => server.closeAllConnections(),
  };
}

/**
 * Node's HTTP server as the service needs it: Deno's bounds on a head, no `Host` or `Expect` check of
 * Node's own (the handler decides), the timeouts, and listeners for what Node would otherwise answer
 * itself or drop: CONNECT, an expectation, a parser's refusal.
 */
function createNodeServer(state: AnswerState, onError: (error: unknown) => void): Server {
  const server = createServer({
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
    headersTimeout: HEADERS_TIMEOUT_MS,
    requestTimeout: REQUEST_TIMEOUT_MS,
    connectionsCheckingInterval: TIMEOUT_CHECK_MS,
    maxHeaderSize: MAX_HEAD_BYTES,
    requireHostHeader: false,
    // A request without a body (no Content-Length, no Transfer-Encoding) comes with its body stream
    // already ended: Node then dumps, ends and closes no stream per request (Node 24.12 and later;
    // ignored before). The service reads no body.
    optimizeEmptyRequests: true,
    ServerResponse: VersionedResponse,
  }, (req, res) => {
    answer(req, res, state, onError);
    // An answer Node's server does not write waits for this response (http1/in_flight.ts), unless
    // its bytes are already handed to the socket: ended at once, and not queued behind another.
    if (!res.writableEnded || res.socket === null) countResponse(req.socket, res);
    noteBody(req.socket, req);
  });
  // One more than Deno takes, to tell a head with too many fields (Node drops those past the count).
  server.maxHeadersCount = MAX_FIELDS + 1;
  const raw: ClientErrorOptions = {
    handler: state.handler,
    fallback: () => state.fallback,
    onError,
  };
  server.on("clientError", createClientErrorListener(raw));
  server.on("connect", createConnectListener(raw));
  // Deno sends 100 Continue only to a request with a body, and ignores any other expectation (RFC
  // 9110 section 10.1.1 lets a server answer 417 to one, not must): Node's own would send 100 to
  // every `Expect: 100-continue` and 417 to the rest.
  server.on("checkContinue", (req: IncomingMessage, res: ServerResponse) => {
    if (hasBody(req)) res.writeContinue();
    server.emit("request", req, res);
  });
  server.on("checkExpectation", (req: IncomingMessage, res: ServerResponse) => {
    server.emit("request", req, res);
  });
  return server;
}

/** Whether a request announces a body: a `Content-Length` above 0, or `Transfer-Encoding`. */
function hasBody(req: IncomingMessage): boolean {
  const length = req.headers["content-length"];
  return req.headers["transfer-encoding"] !== undefined ||
    (length !== undefined && Number(length) > 0);
}

/** Listens, resolving once bound, rejecting with the error that prevented it. */
function listen(server: Server, options: NodeServeOptions): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(
      {
        host: options.hostname,
        port: options.port,
        ...(options.reusePort ? { reusePort: true } : {}),
      },
      () => {
        server.off("error", reject);
        resolve();
      },
    );
  });
}

/**
 * Reports accept failures (`lib/lifecycle/listener_events.ts`): Node emits them as the server's
 * `error` event and keeps listening (libuv accepts and closes the waiting connections while no
 * descriptor is free); an incident is over once connections have been accepted again for a while.
 */
function watchAccepts(server: Server, emit: (event: ListenerEvent) => void): void {
  const incidents = createAcceptIncidents(emit);
  server.on("error", (error) => incidents.failed(error));
  server.on("connection", () => incidents.accepting());
  server.on("close", () => incidents.cancel());
}

/**
 * Answers one request with the handler's answer (`fast_path.ts`), or its refusal. The handler is
 * given the request as it reads it: its method, its URL as Deno builds it, and its fields' `get` and
 * `has`; not a `Request` built by undici, which costs more than the rest of a request on Node
 * (tests/bench/README.md, "Node"), while the handler reads nothing else (the service reads no body).
 */
function answer(
  req: IncomingMessage,
  res: ServerResponse,
  state: AnswerState,
  onError: (error: unknown) => void,
): void {
  const method = req.method ?? "GET";
  const headers = new RawFields(req.rawHeaders);
  const url = urlOf(method, req.url ?? "/", req.headers.host, state.fallback);
  const info = peerOf(req.socket);
  // A target its method cannot have, or more fields than Deno takes: Deno's parser's 400.
  if (url === undefined || req.rawHeaders.length > 2 * MAX_FIELDS) {
    refuse(req, res, state, { method, url, headers }, info).catch((error) => {
      onError(error);
      if (!res.headersSent) res.writeHead(500, { "content-length": "0" });
      res.end();
    });
    return;
  }
  const request = { method, url, headers } as unknown as Request;
  sendAnswer(state.handler, request, info, res, { state, onError });
}

/** Answers a request Deno's parser would refuse with the handler's refusal, closing the connection. */
async function refuse(
  req: IncomingMessage,
  res: ServerResponse,
  state: AnswerState,
  head: ReadHead,
  info: PeerInfo,
): Promise<void> {
  const response = await state.handler.refuse("bad_request", head, info);
  const body = response.body === null ? undefined : new Uint8Array(await response.arrayBuffer());
  const fields: string[] = [];
  for (const [name, value] of response.headers) fields.push(name, value);
  fields.push("connection", "close");
  if (body !== undefined) fields.push("content-length", String(body.length));
  res.writeHead(response.status, fields);
  res.end(req.method === "HEAD" ? undefined : body);
}
