/**
 * Deno's output: the writers of stdout (the access log) and stderr (operational events), which never
 * block (`lib/lifecycle/line_writer.ts`), the event output main.ts installs
 * (`lib/lifecycle/events.ts`), and the exits of a failed start (one sentence, exit 1).
 *
 * `Deno.stdout` and `Deno.stderr` are blocking descriptors: `writeSync` on a full pipe stops the
 * whole process until its reader reads. Their `write` runs on a thread of the runtime's blocking
 * pool, which waits there instead, so the lines go that way (measured: tests/bench/README.md,
 * "Logs that cannot be written").
 *
 * @module
 */
// deno-lint-ignore-file no-console

import {
  droppedLinesEvent,
  type EventOutput,
  fatalSentence,
  useEventOutput,
} from "../lifecycle/events.ts";
import { createLineWriter, type LineSink, type LineWriter } from "../lifecycle/line_writer.ts";
import { otelConsoleMode, otelSignals } from "../telemetry/enabled.ts";

const ENCODER = new TextEncoder();

/**
 * How long a failed start waits for stderr to take its sentence (and the events before it): a
 * reader that reads takes it in a moment; one that does not must not hold the exit.
 */
const FATAL_SETTLE_MS = 1000;

/** A sink over one of Deno's standard streams, written off the main thread (`write`, not `writeSync`). */
function sinkOf(stream: { write(bytes: Uint8Array): Promise<number> }): LineSink {
  return {
    async write(text) {
      const bytes = ENCODER.encode(text);
      for (let done = 0; done < bytes.length;) done += await stream.write(bytes.subarray(done));
    },
  };
}

/** The access log's writer (stdout). */
export const STDOUT_LINES: LineWriter = createLineWriter(sinkOf(Deno.stdout), {
  stream: "stdout",
  onDropped: droppedLinesEvent,
});

/** The operational events' writer (stderr). */
export const STDERR_LINES: LineWriter = createLineWriter(sinkOf(Deno.stderr), {
  stream: "stderr",
  onDropped: droppedLinesEvent,
});

/**
 * How an event leaves the process. Without OpenTelemetry, a JSON line on stderr. With it, events go
 * through `console`, the only way into Deno's log exporter: each becomes a log record with its
 * level, in the request's trace when one is active. Under `OTEL_DENO_CONSOLE=capture` (Deno's
 * default) Deno also prints it, info on stdout (the runtime decides: start-up warns), and prints it
 * as the runtime's console does, synchronously; under `replace` it only exports, so the line is
 * written on stderr here too; under `ignore` nothing is exported and the line goes to stderr.
 */
const ROUTE: { console: boolean; stderr: boolean } = (() => {
  if (otelSignals() === undefined) return { console: false, stderr: true };
  const mode = otelConsoleMode((name) => Deno.env.get(name));
  return { console: mode !== "ignore", stderr: mode !== "capture" };
})();

/**
 * Deno's event output. Not `console.error` without OpenTelemetry: its first use loads the console
 * (lib/README.md, "Cold start"), and the "listening" line comes before the first response.
 */
export const DENO_EVENTS: EventOutput = {
  event(level, line) {
    if (ROUTE.console) console[level](line.trimEnd());
    if (ROUTE.stderr) STDERR_LINES.write(line);
  },
  async fatal(text) {
    if (ROUTE.console) console.error(text);
    if (ROUTE.stderr) STDERR_LINES.write(`${text}\n`);
    await STDERR_LINES.settle(FATAL_SETTLE_MS);
    await beforeFatalExit?.();
    Deno.exit(1);
  },
};

/** Makes Deno's output the process's (main.ts, first thing). */
export function useDenoEvents(): void {
  useEventOutput(DENO_EVENTS);
}

/** The start-up failures' explanations: every entry's, and Deno KV's. */
export type Explanations =
  & typeof import("../lifecycle/startup_errors.ts")
  & typeof import("./startup.ts");

/**
 * Says the one sentence `explain` makes of a start-up failure and exits 1: start-up failures are
 * the operator's, not a stack trace. The explanations' modules are imported only then, so that a
 * start that succeeds does not load them (lib/README.md, "Cold start").
 */
export async function fatalExplained(
  explain: (startup: Explanations) => string,
): Promise<never> {
  const [neutral, deno] = await Promise.all([
    import("../lifecycle/startup_errors.ts"),
    import("./startup.ts"),
  ]);
  return await fatalSentence(explain({ ...neutral, ...deno }));
}

/** What a start-up failure awaits before its exit, once telemetry is on (its exit watchdog). */
let beforeFatalExit: (() => Promise<void>) | undefined;

/**
 * Sets what a failed start awaits before it exits: with OpenTelemetry on, the exit flushes the
 * exporters and can hang like a stop's (lib/telemetry/exit_watchdog.ts), so a start-up failure
 * after telemetry is loaded arms the same bound.
 */
export function onFatalExit(hook: () => Promise<void>): void {
  beforeFatalExit = hook;
}

/** Anything thrown while starting that no check explains still ends in one sentence. */
export function onStartupRejection(rejection: PromiseRejectionEvent): void {
  rejection.preventDefault();
  void fatalExplained((startup) => startup.explainStartupError(rejection.reason));
}
