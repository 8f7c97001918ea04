/**
 * The start and stop of a process that listens itself (Deno's `main.ts --listen`, Node's entry),
 * written once: its phase (starting, serving, stopping: a stop that begins is observable, for a
 * readiness probe to turn: `health.ts`), the stop signals heard before the entry listens, and the
 * stop at SIGTERM or SIGINT with its timing.
 *
 * The stop: answer with `Connection: close` for {@linkcode DRAIN_MS}, so that busy keep-alive
 * clients stop reusing their connections before they are closed under them; stop listening and
 * finish what is in flight; hand the access log's last lines on; close the store (a last sync);
 * give each stream a moment to take what is queued (`line_writer.ts`); exit 0. A stop past
 * {@linkcode STOP_DEADLINE_MS} exits anyway.
 *
 * @module
 */

import { errorFields, event } from "./events.ts";
import { DEADLINE_SETTLE_MS, endLines, type LineWriter } from "./line_writer.ts";

/** How long the service keeps answering (with `Connection: close`) once shutdown begins, in ms. */
export const DRAIN_MS = 1000;

/**
 * The longest a shutdown may take before the process exits anyway, in ms: Deno Deploy kills an
 * instance 5 s after its SIGINT, and nothing the service serves takes longer than a store timeout.
 */
export const STOP_DEADLINE_MS = 4000;

/** Where a process is in its life. */
export type Phase = "starting" | "serving" | "stopping";

/** A process's phase and the listeners of its stop. */
export interface Lifecycle {
  /** Where the process is: `stopping` from the moment a stop begins. */
  readonly phase: Phase;
  /** It listens: serving from now on. */
  serving(): void;
  /** Calls `listener` with the signal when a stop begins (before the drain). */
  onStopping(listener: (signal: string) => void): void;
  /** Begins the stop at `signal`; false when one began already (a stop is made once). */
  beginStop(signal: string): boolean;
}

/**
 * A process's lifecycle, starting.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const lifecycle = createLifecycle();
 * const heard: string[] = [];
 * lifecycle.onStopping((signal) => heard.push(signal));
 * lifecycle.serving();
 * assert.equal(lifecycle.phase, "serving");
 * assert.equal(lifecycle.beginStop("SIGTERM"), true);
 * assert.equal(lifecycle.beginStop("SIGINT"), false);
 * assert.equal(lifecycle.phase, "stopping");
 * assert.deepEqual(heard, ["SIGTERM"]);
 * ```
 */
export function createLifecycle(): Lifecycle {
  let phase: Phase = "starting";
  const listeners: Array<(signal: string) => void> = [];
  return {
    get phase() {
      return phase;
    },
    serving() {
      if (phase === "starting") phase = "serving";
    },
    onStopping(listener) {
      listeners.push(listener);
    },
    beginStop(signal) {
      if (phase === "stopping") return false;
      phase = "stopping";
      for (const listener of listeners) listener(signal);
      return true;
    },
  };
}

/** The signals that stop a process that listens itself. */
export const STOP_SIGNALS = ["SIGTERM", "SIGINT"] as const;

/** One of {@linkcode STOP_SIGNALS}. */
export type StopSignal = typeof STOP_SIGNALS[number];

/** The stop signals, heard from {@linkcode hearStopSignals} on. */
export interface StopSignals {
  /** What to do at a signal from now on; a signal heard before is handed to it at once. */
  ready(stop: (signal: StopSignal) => void): void;
}

/**
 * Listens for the stop signals through `listen` (`Deno.addSignalListener`, `process.on`) before
 * the entry listens, so that no moment is left, once "listening" is said, in which a signal would
 * still meet the runtime's default (the process killed, no stop). A signal heard before the entry
 * is {@linkcode StopSignals.ready} waits for it: the listeners' start is one step, and the stop
 * begins as soon as there is a server to stop.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const handlers = new Map<string, () => void>();
 * const signals = hearStopSignals((signal, handler) => handlers.set(signal, handler));
 * handlers.get("SIGTERM")!();
 * const stops: string[] = [];
 * signals.ready((signal) => stops.push(signal));
 * handlers.get("SIGINT")!();
 * assert.deepEqual(stops, ["SIGTERM", "SIGINT"]);
 * ```
 */
export function hearStopSignals(
  listen: (signal: StopSignal, handler: () => void) => void,
): StopSignals {
  let stop: ((signal: StopSignal) => void) | undefined;
  let heard: StopSignal | undefined;
  for (const signal of STOP_SIGNALS) {
    listen(signal, () => {
      if (stop === undefined) heard ??= signal;
      else stop(signal);
    });
  }
  return {
    ready(given) {
      stop = given;
      if (heard !== undefined) given(heard);
    },
  };
}

/** What a stop needs of the entry: its server, access log, store, streams and exit. */
export interface StopParts {
  /** From now on every response carries `Connection: close`. */
  drain(): void;
  /** Stops listening, finishes the requests in flight and closes the connections. */
  shutdown(): Promise<void>;
  /** Closes every connection at once (a stop past its deadline), where the runtime can. */
  closeAll?(): void;
  /** Hands the access log's last lines to stdout's writer. */
  flushAccessLog(): void;
  /** Closes the store (a shared store's last sync). */
  closeStore(): Promise<void> | void;
  /** The process's streams. */
  lines: { stdout: LineWriter; stderr: LineWriter };
  /** Ends the process with `code` (Deno: after telemetry's exit bound). */
  exit(code: number): Promise<void> | void;
}

/**
 * The stop at `signal`, once (a second signal during it does nothing): "shutting down", the drain,
 * the shutdown, the last lines, the store, "stopped", the streams, the exit. A stop past
 * {@linkcode STOP_DEADLINE_MS} exits anyway ({@linkcode overranStop}). A step that fails (a store
 * whose last write fails at close) is one error line and exit 1, after the steps it did not stop:
 * never an unhandled rejection, which would print a stack that is no JSON line.
 */
export async function stopGracefully(
  lifecycle: Lifecycle,
  signal: string,
  parts: StopParts,
): Promise<void> {
  if (!lifecycle.beginStop(signal)) return;
  event("info", "shutting down: finishing requests in flight", { signal });
  const deadline = setTimeout(() => void overranStop(parts), STOP_DEADLINE_MS);
  let code = 0;
  try {
    parts.drain();
    await new Promise((resolve) => setTimeout(resolve, DRAIN_MS));
    await parts.shutdown();
  } catch (error) {
    code = stepFailed("the server's shutdown", error);
    parts.closeAll?.();
  }
  parts.flushAccessLog();
  try {
    await parts.closeStore();
  } catch (error) {
    code = stepFailed("closing the rate-limit store", error);
  }
  event(code === 0 ? "info" : "error", code === 0 ? "stopped" : "stopped after an error");
  await endLines(parts.lines);
  clearTimeout(deadline);
  await parts.exit(code);
}

/** Says that a step of the stop failed, with the error's fields; answers the exit code, 1. */
function stepFailed(step: string, error: unknown): number {
  event("error", `${step} failed at stop: exiting 1 once the rest of the stop is done`, {
    ...errorFields(error),
  });
  return 1;
}

/**
 * The end of a stop past its deadline: the access log's last lines handed on, one warning, every
 * connection closed where the runtime can, what the streams could not take said, exit 0.
 */
export async function overranStop(
  parts: Pick<StopParts, "flushAccessLog" | "closeAll" | "lines" | "exit">,
): Promise<void> {
  parts.flushAccessLog();
  event("warn", "shutdown overran its deadline: exiting with connections still open", {
    deadlineMs: STOP_DEADLINE_MS,
  });
  parts.closeAll?.();
  await endLines(parts.lines, DEADLINE_SETTLE_MS);
  await parts.exit(0);
}
