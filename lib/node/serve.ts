/**
 * The project's own adapter of a `fetch` handler to `node:http` (chosen by measurement over srvx and
 * `@hono/node-server`: tests/bench/README.md, "Node"), with what a public service needs around it:
 *
 * - each request as the handler reads it (its method, its URL from `Host` and the target, its
 *   fields' `get` and `has`: not a `Request` built by undici, the largest cost measured) and the
 *   socket's address as the caller's `PeerInfo`;
 * - each `Response` sent whole with its `Content-Length` (the service's bodies are bytes it holds);
 * - a drain: once {@linkcode NodeServer.drain} is called, every response carries `Connection: close`,
 *   so that busy keep-alive clients stop reusing their connections before the listener stops (the
 *   same rule as Deno's, `lib/server/listener.ts`);
 * - accept failures (EMFILE, "too many open files", which Node reports as the server's `error`
 *   event, its listener kept) reported once per incident, and the recovery after a second of
 *   connections accepted again;
 * - an idle keep-alive connection kept {@linkcode KEEP_ALIVE_TIMEOUT_MS}, longer than nginx keeps
 *   its idle upstream connections (60 s), where Node's default (5 s) would close connections nginx
 *   is about to reuse.
 *
 * @module
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Handler } from "../handler.ts";
import type { PeerInfo } from "../limit/caller/caller_key.ts";
import { messageOf } from "../text/error_message.ts";

/**
 * How long an idle keep-alive connection is kept, in ms: above nginx's `keepalive_timeout` for its
 * upstream connections (60 s by default), so the proxy, not the service, closes an idle connection,
 * and never one it has just sent a request on.
 */
export const KEEP_ALIVE_TIMEOUT_MS = 65_000;

/** How long a new accept must last before an accept incident is reported over, in ms. */
const RECOVERED_AFTER_MS = 1000;

/** An event of a {@linkcode NodeServer}, for the operational log (as `lib/server/listener.ts`'s). */
export type NodeServeEvent =
  | { kind: "listening"; address: string }
  | { kind: "accept_failed"; error: string }
  | { kind: "recovered"; downMs: number };

/** Options of {@linkcode serveNode}. */
export interface NodeServeOptions {
  /** Interface to listen on. */
  hostname: string;
  /** Port to listen on; 0 picks a free one. */
  port: number;
  /** Lets another process listen on the same TCP port (`SO_REUSEPORT`, Linux). */
  reusePort?: boolean;
  /** Receives `listening`, then one `accept_failed` and one `recovered` per incident. */
  onEvent?: (event: NodeServeEvent) => void;
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
 * Serves `handler` on `hostname:port`; rejects with Node's error when it cannot listen (the port
 * taken, a permission), for the entry to say in one sentence.
 */
export async function serveNode(handler: Handler, options: NodeServeOptions): Promise<NodeServer> {
  const state = { closing: false };
  const onError = options.onError ?? (() => {});
  const server = createServer({ keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS }, (req, res) => {
    answer(handler, req, res, state).catch((error) => {
      onError(error);
      if (!res.headersSent) res.writeHead(500, { "content-length": "0" });
      res.end();
    });
  });
  await listen(server, options);
  const bound = server.address() as AddressInfo;
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
 * Reports accept failures: Node emits them as the server's `error` event and keeps listening (libuv
 * accepts and closes the waiting connections while no descriptor is free); one event per incident,
 * and one when connections have been accepted again for a second.
 */
function watchAccepts(server: Server, emit: (event: NodeServeEvent) => void): void {
  let since: number | undefined;
  let recovery: ReturnType<typeof setTimeout> | undefined;
  server.on("error", (error) => {
    clearTimeout(recovery);
    recovery = undefined;
    if (since !== undefined) return;
    since = Date.now();
    emit({ kind: "accept_failed", error: messageOf(error) });
  });
  server.on("connection", () => {
    if (since === undefined || recovery !== undefined) return;
    recovery = setTimeout(() => {
      if (since === undefined) return;
      emit({ kind: "recovered", downMs: Date.now() - since });
      since = undefined;
      recovery = undefined;
    }, RECOVERED_AFTER_MS);
    recovery.unref();
  });
}

/** Answers one request with `handler`'s response. */
async function answer(
  handler: Handler,
  req: IncomingMessage,
  res: ServerResponse,
  state: { readonly closing: boolean },
): Promise<void> {
  const response = await handler(requestOf(req), peerOf(req));
  const body = response.body === null ? undefined : new Uint8Array(await response.arrayBuffer());
  const fields: string[] = [];
  for (const [name, value] of response.headers) fields.push(name, value);
  if (state.closing) fields.push("connection", "close");
  // As Deno sends them: the body's length, and none for a response without a body (a 304, a
  // preflight's 204, HEAD: the handler gives those their own).
  if (body !== undefined) fields.push("content-length", String(body.length));
  res.writeHead(response.status, fields);
  res.end(req.method === "HEAD" ? undefined : body);
}

/**
 * The request as the handler reads it: its method, its URL (`http://` + `Host` + the target, as
 * Deno makes it) and its fields' `get` and `has`. Not a `Request` built by undici: that costs more
 * than the rest of a request on Node (tests/bench/README.md, "Node"), and the handler reads nothing
 * else (no body: the service reads none).
 */
function requestOf(req: IncomingMessage): Request {
  return {
    method: req.method ?? "GET",
    url: `http://${req.headers.host ?? ""}${req.url ?? "/"}`,
    headers: new RawFields(req.rawHeaders),
  } as unknown as Request;
}

/**
 * A request's fields as `Headers` answers `get` and `has`, over Node's raw list: a name matched
 * whatever its case, the values of a repeated field joined with ", " (Node's own `headers` object
 * keeps only the first of some, such as a repeated `Host`).
 */
class RawFields {
  readonly #raw: readonly string[];

  constructor(raw: readonly string[]) {
    this.#raw = raw;
  }

  get(name: string): string | null {
    const wanted = name.toLowerCase();
    const raw = this.#raw;
    let value: string | null = null;
    for (let i = 0; i < raw.length; i += 2) {
      const field = raw[i]!;
      if (field.length === wanted.length && field.toLowerCase() === wanted) {
        value = value === null ? raw[i + 1]! : `${value}, ${raw[i + 1]}`;
      }
    }
    return value;
  }

  has(name: string): boolean {
    return this.get(name) !== null;
  }
}

/** The caller's address: the socket's peer (`::ffff:`-mapped IPv4 is unmapped by the caller key). */
function peerOf(req: IncomingMessage): PeerInfo {
  const hostname = req.socket.remoteAddress;
  return {
    remoteAddr: hostname === undefined
      ? { transport: "none" }
      : { transport: "tcp", hostname, port: req.socket.remotePort ?? 0 },
  };
}
