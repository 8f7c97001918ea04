/**
 * Listening for `main.ts --listen` (`deno task start`, the compiled binary): a listener that survives
 * running out of file descriptors, and a drain that tells keep-alive clients to close before the
 * process stops (the stop itself: `lib/lifecycle/stop.ts`).
 *
 * `Deno.serve` accepts connections in the runtime; when `accept` fails (EMFILE, "Too many open files"),
 * its `finished` promise rejects and its listener is gone, while the connections it already accepted
 * keep being served. {@linkcode serveResilient} then starts a new `Deno.serve` on the same address,
 * retrying with a growing delay until descriptors are free again, and reports one incident
 * (`lib/lifecycle/listener_events.ts`).
 *
 * On shutdown, hyper closes idle keep-alive connections at once, so a client that sends its next
 * request at that moment gets no answer. {@linkcode createDrain} marks the service as closing: every
 * response from then on carries `Connection: close`, so well-behaved clients stop reusing their
 * connections before the listener and the connections are closed. The drain does not depend on the
 * listener, so `deno serve` and Deno Deploy paths can use it as well.
 *
 * @module
 */

import { createAcceptIncidents, type ListenerEvent } from "../lifecycle/listener_events.ts";

/** The first delay before listening again after accepting failed, in ms. */
const RELISTEN_FIRST_DELAY_MS = 100;
/** The longest delay between two attempts to listen again, in ms. */
const RELISTEN_MAX_DELAY_MS = 1000;

/** What {@linkcode createDrain} returns: a handler wrapper and the switch that starts closing. */
export interface Drain {
  /** Wraps `handler`: once {@linkcode Drain.close} was called, responses carry `Connection: close`. */
  wrap<A extends Deno.Addr>(handler: Deno.ServeHandler<A>): Deno.ServeHandler<A>;
  /** Starts closing: every response from now on asks the client to close its connection. */
  close(): void;
  /** Whether {@linkcode Drain.close} was called. */
  readonly closing: boolean;
}

/**
 * Creates a drain: a flag that, once set, adds `Connection: close` to every response.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const drain = createDrain();
 * const handler = drain.wrap(() => new Response("ok"));
 * const info = { remoteAddr: { transport: "tcp", hostname: "127.0.0.1", port: 1 } } as const;
 * drain.close();
 * const response = await handler(new Request("http://localhost/"), info as Deno.ServeHandlerInfo);
 * assert.equal(response.headers.get("connection"), "close");
 * ```
 */
export function createDrain(): Drain {
  let closing = false;
  return {
    wrap(handler) {
      // Until shutdown, a response passes through as the handler made it (often synchronously): the
      // drain costs one flag test per request, not a promise.
      return (request, info) => {
        const response = handler(request, info);
        if (!closing) return response;
        return response instanceof Promise ? response.then(closed) : closed(response);
      };
    },
    close() {
      closing = true;
    },
    get closing() {
      return closing;
    },
  };
}

/** A fresh Response with `Connection: close`: the handler's may have immutable headers or be shared. */
function closed(response: Response): Response {
  const copy = new Response(response.body, response);
  copy.headers.set("connection", "close");
  return copy;
}

/**
 * An address as a URL-like string for the operational log: `http://host:port/`, `unix:<path>` or
 * `vsock:<cid>:<port>`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(addressOf({ transport: "tcp", hostname: "::1", port: 8000 }), "http://[::1]:8000/");
 * assert.equal(addressOf({ transport: "unix", path: "/run/d.sock" }), "unix:/run/d.sock");
 * ```
 */
export function addressOf(addr: Deno.Addr): string {
  if ("path" in addr) return `unix:${addr.path}`;
  if ("cid" in addr) return `vsock:${addr.cid}:${addr.port}`;
  const host = addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname;
  return `http://${host}:${addr.port}/`;
}

/** Options of {@linkcode serveResilient}. */
export interface ResilientServeOptions {
  /** Interface to listen on. */
  hostname: string;
  /** Port to listen on; 0 picks a free one, kept when listening again. */
  port: number;
  /**
   * Lets another process listen on the same TCP port (`SO_REUSEPORT`, Linux; needs `--unstable-net`),
   * so that a new instance can take over the port before this one stops.
   */
  reusePort?: boolean;
  /** Receives the first `listening`, then one `accept_failed` and one `recovered` per incident. */
  onEvent?: (event: ListenerEvent) => void;
  /** Whether the listener leaves the process free to exit (the operator port's: `health_listener.ts`). */
  unref?: boolean;
}

/** A server started by {@linkcode serveResilient}. */
export interface ResilientServer {
  /** The address it listens on. */
  readonly addr: Deno.Addr;
  /** Settles when {@linkcode ResilientServer.shutdown} has finished; never rejects. */
  readonly finished: Promise<void>;
  /** Stops listening (for good), finishes requests in flight and closes every connection. */
  shutdown(): Promise<void>;
}

/** Where a listener listens: TCP, or the unix socket or vsock port `DENO_SERVE_ADDRESS` may name. */
type ListenAt =
  | { hostname: string; port: number }
  | { path: string }
  | { cid: number; port: number };

/**
 * Where to listen again: the first listener's own address. That is the one the runtime chose when
 * `DENO_SERVE_ADDRESS` overrode the options (as on Deno Deploy), and the runtime reads that variable
 * for the first `Deno.serve` only.
 */
function listenAtOf(addr: Deno.Addr): ListenAt {
  if ("path" in addr) return { path: addr.path };
  if ("cid" in addr) return { cid: addr.cid, port: addr.port };
  return { hostname: addr.hostname, port: addr.port };
}

/**
 * `Deno.serve`'s options for `where`; `reusePort` only when wanted, and for TCP only: the option is
 * unstable, and Deno exits when it is given without `--unstable-net`.
 */
function serveOptions(where: ListenAt, reusePort = false): Deno.ServeOptions<Deno.Addr> {
  const reuse = reusePort && "hostname" in where ? { reusePort: true } : {};
  // Without the flag Deno prints its own line and exits 70; `Deno.listenDatagram` is defined only
  // with it, so the start-up can say what to do instead, and exit 1.
  if (reusePort && !("listenDatagram" in Deno)) {
    throw new Deno.errors.NotSupported("REUSE_PORT=true needs Deno's --unstable-net flag");
  }
  return { ...where, ...reuse, onListen: () => {} };
}

/**
 * Serves `handler` on `hostname:port` (or where `DENO_SERVE_ADDRESS` says), listening again whenever
 * accepting fails.
 *
 * Throws when the first listener cannot be started (port taken, no permission); later failures are
 * retried until {@linkcode ResilientServer.shutdown}.
 */
export function serveResilient(
  handler: Deno.ServeHandler<Deno.Addr>,
  options: ResilientServeOptions,
): ResilientServer {
  const servers = new Set<Deno.HttpServer<Deno.Addr>>();
  const emit = options.onEvent ?? (() => {});
  const incidents = createAcceptIncidents(emit);
  let stopped = false;
  let retry: ReturnType<typeof setTimeout> | undefined;

  const listen = (where: ListenAt): Deno.HttpServer<Deno.Addr> => {
    const server = Deno.serve(serveOptions(where, options.reusePort), handler);
    if (options.unref) server.unref();
    servers.add(server);
    server.finished.then(
      () => servers.delete(server),
      (error) => failed(error),
    );
    return server;
  };

  const failed = (error: unknown) => {
    // The listener is gone; the connections it accepted are still served and kept for shutdown.
    if (stopped) return incidents.cancel();
    incidents.failed(error);
    schedule(RELISTEN_FIRST_DELAY_MS);
  };

  const schedule = (delayMs: number) => {
    clearTimeout(retry);
    retry = setTimeout(() => {
      if (stopped) return;
      incidents.attempt();
      try {
        listen(listenAtOf(addr));
      } catch {
        // Still no descriptor (or the port is briefly taken): wait longer.
        schedule(Math.min(delayMs * 2, RELISTEN_MAX_DELAY_MS));
        return;
      }
      incidents.accepting();
    }, delayMs);
  };

  const first = listen({ hostname: options.hostname, port: options.port });
  const addr = first.addr;
  emit({ kind: "listening", address: addressOf(addr) });
  const { promise: finished, resolve: done } = Promise.withResolvers<void>();

  return {
    addr,
    finished,
    async shutdown() {
      stopped = true;
      clearTimeout(retry);
      incidents.cancel();
      await Promise.all(
        [...servers].map((server) => server.shutdown().catch(() => {/* already failed */})),
      );
      done();
    },
  };
}
