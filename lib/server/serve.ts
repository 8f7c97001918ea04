/**
 * Serving the handler: on `HOSTNAME:PORT` with a drain and a graceful stop on SIGTERM and SIGINT
 * when the process listens itself (`--listen`, Deno Deploy), or leaving the listener to the runtime
 * (`deno serve`); and the warning where several processes count one caller apart.
 *
 * @module
 */

import type { AccessLog } from "../access_log.ts";
import type { Config } from "../config.ts";
import type { Handler } from "../handler.ts";
import type { RateLimitStore } from "../limit/core/decision.ts";
import type { Telemetry } from "../telemetry/load.ts";
import { event, fatalExplained } from "./events.ts";
import {
  addressOf,
  createDrain,
  DRAIN_MS,
  type ResilientServer,
  type ServeEvent,
  serveResilient,
  STOP_DEADLINE_MS,
} from "./listener.ts";

/** What {@linkcode serve} serves with. */
export interface ServeOptions {
  config: Config;
  onDeploy: boolean;
  /** Whether this process listens itself; otherwise the runtime does (`deno serve`). */
  listen: boolean;
  /** Whether this is the main module of its worker (`deno serve` evaluates it as such). */
  main: boolean;
  store: RateLimitStore;
  accessLog: AccessLog | undefined;
  telemetry: Telemetry | undefined;
}

/**
 * Serves `fetch`, listening or not; `finished` never settles while listening (the process exits when
 * stopped), and settles at once when the runtime owns the listener.
 */
export async function serve(
  fetch: Handler,
  options: ServeOptions,
): Promise<{ finished: Promise<void> }> {
  const { config, listen } = options;
  // The memory store counts for this process alone: say so at start where the service can tell that
  // other processes or isolates share its callers' traffic (shared_traffic.ts), once it listens (or,
  // under `deno serve`, which evaluates main.ts as the main module in every worker of --parallel,
  // once the workers have found each other).
  const sharedTraffic = config.rateLimitStore === "memory" &&
      (options.onDeploy || (listen && config.reusePort) || !listen)
    ? await import("./shared_traffic.ts")
    : undefined;
  if (!listen) {
    if (sharedTraffic && options.main) {
      void sharedTraffic.watchServeWorkers({
        onSeveral: (workers) =>
          event("warn", sharedTraffic.parallelWorkersWarning(workers), { workers }),
      });
    }
    // The runtime owns the listener: on SIGTERM or SIGINT it finishes the requests in flight, then
    // unloads the module. Exiting at the signal would cut them short; the lines they log are
    // written at unload instead.
    globalThis.addEventListener("unload", () => options.accessLog?.flush());
    if (options.main) runtimeStopEvents();
    return { finished: Promise.resolve() };
  }
  const warning = sharedTraffic?.sharedTrafficWarning({
    store: config.rateLimitStore,
    reusePort: config.reusePort,
    onDenoDeploy: options.onDeploy,
  });
  const drain = createDrain();
  let server: ResilientServer;
  try {
    server = serveResilient(drain.wrap(fetch), {
      hostname: config.hostname,
      port: config.port,
      reusePort: config.reusePort,
      onEvent: serveEventLogger(options, warning),
    });
  } catch (error) {
    server = await fatalExplained((startup) => startup.explainListenError(error, config));
  }
  const stopping = stop(server, () => drain.close(), options);
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => void stopping(signal));
  }
  // Never settles: the stop exits the process. Were it `server.finished`, main.ts's evaluation would
  // end while the store closes (Redis takes a round trip), and Deno then prints its non-JSON warning
  // about a default `fetch` export run with `deno run` (runtime/js/99_main.js, the main module
  // handler, which runs when the main module's evaluation completes).
  return { finished: new Promise<void>(() => {}) };
}

/**
 * The events of a process whose listener the runtime owns (`deno serve`, `--parallel` too): as
 * `onListen` of the default export, which the runtime calls in its main worker in place of its own
 * non-JSON "Listening on" line (ext/http/00_serve.ts, `registerDeclarativeServer`), the JSON
 * "listening" event with the address, and a warning when `PORT` or `HOSTNAME` names another one
 * (they are `--listen`'s; `deno serve` takes `--port` and `--host`).
 */
export function runtimeListening(
  config: Pick<Config, "baseUrl">,
  env: (name: string) => string | undefined,
): (addr: Deno.Addr) => void {
  return (addr) => {
    event("info", "listening", { address: addressOf(addr), baseUrl: config.baseUrl });
    if (addr.transport !== "tcp") return;
    const port = env("PORT")?.trim();
    if (port && port !== "0" && Number(port) !== addr.port) {
      event(
        "warn",
        `PORT=${
          Number(port)
        } is not the port deno serve listens on (${addr.port}): PORT and HOSTNAME apply to --listen; give deno serve --port (deno task start:parallel passes PORT as --port)`,
        { port: addr.port },
      );
    }
  };
}

/** Under `deno serve`, the main worker's "shutting down" at the signal and "stopped" at unload. */
function runtimeStopEvents(): void {
  // Once: a worker that started during the stop sends the signal again (serve_stop.ts).
  let said = false;
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    try {
      Deno.addSignalListener(signal, () => {
        if (!said) event("info", "shutting down: finishing requests in flight", { signal });
        said = true;
      });
    } catch {
      // No signal support here: the runtime stops as it will.
    }
  }
  globalThis.addEventListener("unload", () => event("info", "stopped"));
}

/**
 * The stop of `server` at a signal (once): answer with `Connection: close` for a moment (`drain`),
 * so that busy keep-alive clients stop reusing their connection before it is closed under them;
 * shut down; flush the access log; close the store; exit. A stop past its deadline exits anyway.
 */
function stop(
  server: ResilientServer,
  drain: () => void,
  options: Pick<ServeOptions, "store" | "accessLog" | "telemetry">,
): (signal: Deno.Signal) => Promise<void> {
  let stopping = false;
  // With OpenTelemetry on, the exit exports one last time: bounded, even where the runtime is not.
  const exit = async () => {
    await options.telemetry?.beforeExit();
    Deno.exit(0);
  };
  return async (signal) => {
    if (stopping) return;
    stopping = true;
    event("info", "shutting down: finishing requests in flight", { signal });
    const deadline = setTimeout(() => {
      options.accessLog?.flush();
      event("warn", "shutdown overran its deadline: exiting with connections still open", {
        deadlineMs: STOP_DEADLINE_MS,
      });
      void exit();
    }, STOP_DEADLINE_MS);
    drain();
    await new Promise((resolve) => setTimeout(resolve, DRAIN_MS));
    await server.shutdown();
    options.accessLog?.flush();
    await options.store.close();
    clearTimeout(deadline);
    event("info", "stopped");
    // Exit here rather than finish evaluating main.ts (see `serve`).
    await exit();
  };
}

/**
 * Writes the listener's events: where it listens (after `warning`, once, before the first
 * "listening": a listener that could not start says only why), and each accept incident once.
 */
function serveEventLogger(
  options: Pick<ServeOptions, "config" | "telemetry">,
  warning: string | undefined,
): (serveEvent: ServeEvent) => void {
  let warned = false;
  return (serveEvent) => {
    options.telemetry?.listenerEvent(serveEvent);
    if (serveEvent.kind === "listening") {
      if (warning !== undefined && !warned) event("warn", warning);
      warned = true;
      event("info", "listening", {
        address: addressOf(serveEvent.addr),
        baseUrl: options.config.baseUrl,
      });
    } else if (serveEvent.kind === "accept_failed") {
      event(
        "warn",
        "accepting connections failed: serving the open ones and listening again when possible",
        { error: serveEvent.error },
      );
    } else {
      event("info", "accepting connections again", {
        downMs: serveEvent.downMs,
        attempts: serveEvent.attempts,
      });
    }
  };
}
