/**
 * Serving the handler on Deno: on `HOSTNAME:PORT` with a drain and the graceful stop of
 * `lib/lifecycle/stop.ts` on SIGTERM and SIGINT when the process listens itself (`--listen`, Deno
 * Deploy), with the operator port on `HEALTH_PORT` when set (`health_listener.ts`), or leaving the
 * listener to the runtime (`deno serve`: `runtime_serve.ts`, where `HEALTH_PORT` is refused); the
 * start-up warnings (`lib/lifecycle/warnings.ts`) said once it listens.
 *
 * @module
 */

import type { AccessLog } from "../access_log.ts";
import type { Config } from "../config/config.ts";
import type { Handler } from "../handler.ts";
import type { RateLimitStore } from "../limit/core/decision.ts";
import type { Telemetry } from "../telemetry/load.ts";
import { type ListenerEvent, logListenerEvent } from "../lifecycle/listener_events.ts";
import { fatal } from "../lifecycle/events.ts";
import {
  hearStopSignals,
  type Lifecycle,
  stopGracefully,
  type StopParts,
} from "../lifecycle/stop.ts";
import { sayStartWarnings } from "../lifecycle/warnings.ts";
import { fatalExplained, STDERR_LINES, STDOUT_LINES } from "./events.ts";
import { serveHealth } from "./health_listener.ts";
import { createDrain, type ResilientServer, serveResilient } from "./listener.ts";
import { runtimeStop, watchWorkers } from "./runtime_serve.ts";

/**
 * Why `deno serve` refuses `HEALTH_PORT`: the runtime owns its listeners and stop, and under
 * `--parallel` every worker runs main.ts, so each would ask for the one port.
 */
const HEALTH_PORT_UNDER_DENO_SERVE =
  "HEALTH_PORT is served by main.ts --listen (deno task start, the compiled binary) and npm start, not under deno serve, whose runtime owns the listeners and whose --parallel workers would each ask for the port: unset HEALTH_PORT, or start with deno task start";

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
  /** The process's phase: serving once it listens, stopping at the signal. */
  lifecycle: Lifecycle;
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
  if (!listen) {
    if (options.main) {
      if (config.healthPort !== undefined) await fatal([HEALTH_PORT_UNDER_DENO_SERVE]);
      await watchWorkers(config);
      // The runtime owns the listener: on SIGTERM or SIGINT it finishes the requests in flight,
      // then unloads the module. Exiting at the signal would cut them short; the lines they log
      // are written before the unload instead.
      runtimeStop(options);
    }
    return { finished: Promise.resolve() };
  }
  // Heard before anything listens: once "listening" is said, a signal always meets the stop.
  const signals = hearStopSignals((signal, handler) => Deno.addSignalListener(signal, handler));
  // The operator port first: a probe never finds the public port serving before it.
  if (config.healthPort !== undefined) await serveHealth(options.lifecycle, config);
  const drain = createDrain();
  let server: ResilientServer;
  try {
    server = serveResilient(drain.wrap(fetch), {
      hostname: config.hostname,
      port: config.port,
      reusePort: config.reusePort,
      onEvent: listenerEvents(options),
    });
  } catch (error) {
    server = await fatalExplained((startup) => startup.explainListenError(error, config));
  }
  const parts = stopParts(server, () => drain.close(), options);
  options.lifecycle.serving();
  signals.ready((signal) => void stopGracefully(options.lifecycle, signal, parts));
  // Never settles: the stop exits the process. Were it `server.finished`, main.ts's evaluation would
  // end while the store closes (Redis takes a round trip), and Deno then prints its non-JSON warning
  // about a default `fetch` export run with `deno run` (runtime/js/99_main.js, the main module
  // handler, which runs when the main module's evaluation completes).
  return { finished: new Promise<void>(() => {}) };
}

/** What the stop of `server` needs: its drain, shutdown, the access log, store, streams, exit. */
function stopParts(
  server: ResilientServer,
  drain: () => void,
  options: Pick<ServeOptions, "store" | "accessLog" | "telemetry">,
): StopParts {
  return {
    drain,
    shutdown: () => server.shutdown(),
    flushAccessLog: () => options.accessLog?.flush(),
    closeStore: () => options.store.close(),
    lines: { stdout: STDOUT_LINES, stderr: STDERR_LINES },
    // With OpenTelemetry on, the exit exports one last time: bounded, even where the runtime is
    // not. Exit here rather than finish evaluating main.ts (see `serve`).
    async exit(code) {
      await options.telemetry?.beforeExit();
      Deno.exit(code);
    },
  };
}

/**
 * Writes the listener's events: the start-up warnings, once, before the first "listening" (a
 * listener that could not start says only why), where it listens, and each accept incident once.
 */
function listenerEvents(
  options: Pick<ServeOptions, "config" | "telemetry" | "onDeploy">,
): (listenerEvent: ListenerEvent) => void {
  let warned = false;
  return (listenerEvent) => {
    options.telemetry?.listenerEvent(listenerEvent);
    if (listenerEvent.kind === "listening" && !warned) {
      warned = true;
      sayStartWarnings({
        config: options.config,
        entry: options.onDeploy ? "deno-deploy" : "deno",
        now: Date.now(),
      });
    }
    logListenerEvent(listenerEvent, options.config.baseUrl);
  };
}
