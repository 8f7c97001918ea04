/**
 * The process whose listener the runtime owns (`deno serve`, `--parallel` too): the default export
 * main.ts gives it, its "listening" event and start-up warnings, the warning of workers that count
 * apart, and its stop (the runtime's, with the service's events, last lines and deadline).
 *
 * @module
 */

import type { AccessLog } from "../access_log.ts";
import type { Config } from "../config/config.ts";
import type { Handler } from "../handler.ts";
import type { Telemetry } from "../telemetry/load.ts";
import { event } from "../lifecycle/events.ts";
import { logListenerEvent } from "../lifecycle/listener_events.ts";
import { type Lifecycle, overranStop, STOP_DEADLINE_MS } from "../lifecycle/stop.ts";
import {
  parallelWorkersWarning,
  sayStartWarnings,
  servePortWarning,
  warn,
} from "../lifecycle/warnings.ts";
import { STDERR_LINES, STDOUT_LINES } from "./events.ts";
import { addressOf } from "./listener.ts";
import type { StopRelay } from "./serve_stop.ts";

/**
 * The default export for `deno serve`: `fetch`, and `onListen`, which the runtime calls in its main
 * worker only. The runtime reads `onListen` in every worker as it takes this export, right before
 * it wires its stop signals: once that is done, the stop relay's worker is ready
 * (`serve_stop.ts`).
 */
export function serveExport(
  fetch: Handler,
  onListen: (addr: Deno.Addr) => void,
  relay: StopRelay | undefined,
): Deno.ServeDefaultExport {
  return {
    fetch,
    get onListen() {
      setTimeout(() => relay?.ready(), 0);
      return onListen;
    },
  } as Deno.ServeDefaultExport;
}

/**
 * The "listening" event of `deno serve`, as `onListen` of the default export, in place of the
 * runtime's own non-JSON "Listening on" line (ext/http/00_serve.ts, `registerDeclarativeServer`):
 * the start-up warnings first, then the address, and a warning when `PORT` names another port
 * (`PORT` and `HOSTNAME` are `--listen`'s; `deno serve` takes `--port` and `--host`).
 */
export function runtimeListening(
  config: Config,
  env: (name: string) => string | undefined,
  lifecycle: Lifecycle,
): (addr: Deno.Addr) => void {
  return (addr) => {
    sayStartWarnings({ config, entry: "deno-serve", now: Date.now() });
    logListenerEvent({ kind: "listening", address: addressOf(addr) }, config.baseUrl);
    lifecycle.serving();
    if (addr.transport !== "tcp") return;
    const port = env("PORT")?.trim();
    if (port && port !== "0" && Number(port) !== addr.port) {
      warn(servePortWarning(Number(port), addr.port));
    }
  };
}

/**
 * With the memory store, finds the other workers of `deno serve --parallel` (`shared_traffic.ts`,
 * imported only then) and says once that each counts its callers apart.
 */
export async function watchWorkers(config: Pick<Config, "rateLimitStore">): Promise<void> {
  if (config.rateLimitStore !== "memory") return;
  const { watchServeWorkers } = await import("./shared_traffic.ts");
  void watchServeWorkers({ onSeveral: (workers) => warn(parallelWorkersWarning(workers)) });
}

/** What the runtime's stop needs of the worker. */
export interface RuntimeStopOptions {
  accessLog: AccessLog | undefined;
  telemetry: Telemetry | undefined;
  lifecycle: Lifecycle;
}

/**
 * The stop the runtime makes: "shutting down" at the signal (the lifecycle stopping); once the
 * runtime has finished the requests in flight (the event loop has nothing left: `beforeunload`),
 * the access log's last lines and "stopped", the unload held (`preventDefault`) until the streams
 * took them; and the stop's deadline, which ends the process if something (a log write to a pipe
 * nobody reads, a request that never ends) still holds it then.
 */
export function runtimeStop(options: RuntimeStopOptions): void {
  const exit = async (code: number) => {
    await options.telemetry?.beforeExit();
    Deno.exit(code);
  };
  const parts = {
    flushAccessLog: () => options.accessLog?.flush(),
    lines: { stdout: STDOUT_LINES, stderr: STDERR_LINES },
    exit,
  };
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    try {
      Deno.addSignalListener(signal, () => {
        // Once: a worker that started during the stop sends the signal again (serve_stop.ts).
        if (!options.lifecycle.beginStop(signal)) return;
        event("info", "shutting down: finishing requests in flight", { signal });
        Deno.unrefTimer(setTimeout(() => void overranStop(parts), STOP_DEADLINE_MS));
      });
    } catch {
      // No signal support here: the runtime stops as it will.
    }
  }
  let stopped = false;
  globalThis.addEventListener("beforeunload", (unload) => {
    if (!stopped) {
      stopped = true;
      options.accessLog?.flush();
      event("info", "stopped");
    }
    // Written when the streams take them: the event loop goes on until then, and this event comes
    // again.
    if (!STDOUT_LINES.idle || !STDERR_LINES.idle) unload.preventDefault();
  });
}
