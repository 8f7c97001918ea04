/**
 * The process's operational events (JSON lines on stderr; stdout carries the access log) and its
 * exits on a failed start (one sentence, exit 1).
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { writeAll } from "../access_log.ts";
import { formatConfigErrors, redactSecrets } from "../config.ts";
import { otelConsoleMode, otelSignals } from "../telemetry/enabled.ts";
import { namedMessageOf } from "../text/error_message.ts";

const ENCODER = new TextEncoder();

/**
 * How an event leaves the process. Without OpenTelemetry, a JSON line on stderr. With it, events go
 * through `console`, the only way into Deno's log exporter: each becomes a log record with its
 * level, in the request's trace when one is active. Under `OTEL_DENO_CONSOLE=capture` (Deno's
 * default) Deno also prints it, info on stdout (the runtime decides: start-up warns); under
 * `replace` it only exports, so the line is written on stderr here too; under `ignore` nothing is
 * exported and the line goes to stderr.
 */
const ROUTE: { console: boolean; stderr: boolean } = (() => {
  if (otelSignals() === undefined) return { console: false, stderr: true };
  const mode = otelConsoleMode((name) => Deno.env.get(name));
  return { console: mode !== "ignore", stderr: mode !== "capture" };
})();

/**
 * One operational event as a JSON line on stderr. Written directly rather than with
 * `console.error`, whose first use loads the console (lib/README.md, "Cold start"): the "listening"
 * line comes before the first response.
 */
export function event(
  level: "info" | "warn" | "error",
  message: string,
  fields: Record<string, unknown> = {},
): void {
  const line = JSON.stringify({ time: new Date().toISOString(), level, message, ...fields });
  if (ROUTE.console) console[level](line);
  if (ROUTE.stderr) writeAll(Deno.stderr, ENCODER.encode(`${line}\n`));
}

/** An error's fields in an event: name, message and stack, secrets redacted. */
export function errorFields(error: unknown): Record<string, unknown> {
  return {
    error: redactSecrets(namedMessageOf(error)),
    stack: error instanceof Error && error.stack ? redactSecrets(error.stack) : undefined,
  };
}

/**
 * A start-up failure's text, where an event goes (ROUTE): under `OTEL_DENO_CONSOLE=replace`,
 * `console.error` only exports, and an exit whose exports hang would lose the sentence, so it is
 * written on stderr too, whole, before the exit.
 */
function sayFatal(text: string): void {
  if (ROUTE.console) console.error(text);
  if (!ROUTE.stderr) return;
  const bytes = ENCODER.encode(`${text}\n`);
  for (let written = 0; written < bytes.length;) {
    written += Deno.stderr.writeSync(bytes.subarray(written));
  }
}

/** Prints the configuration's problems, one sentence each, and exits 1. */
export function fatal(errors: string[]): never {
  sayFatal(formatConfigErrors(errors));
  Deno.exit(1);
}

/**
 * Prints the one sentence `explain` makes of a start-up failure and exits 1: start-up failures are
 * the operator's, not a stack trace. The explanations' module is imported only then, so that a
 * start that succeeds does not load it (lib/README.md, "Cold start").
 */
export async function fatalExplained(
  explain: (startup: typeof import("./startup.ts")) => string,
): Promise<never> {
  // A store's or the runtime's own message may quote KV_PATH or REDIS_URL whole.
  sayFatal(redactSecrets(explain(await import("./startup.ts"))));
  await beforeFatalExit?.();
  Deno.exit(1);
}

/** What a start-up failure awaits before its exit, once telemetry is on (its exit watchdog). */
let beforeFatalExit: (() => Promise<void>) | undefined;

/**
 * Sets what {@linkcode fatalExplained} awaits before it exits: with OpenTelemetry on, the exit
 * flushes the exporters and can hang like a stop's (lib/telemetry/exit_watchdog.ts), so a start-up
 * failure after telemetry is loaded arms the same bound.
 */
export function onFatalExit(hook: () => Promise<void>): void {
  beforeFatalExit = hook;
}

/** Anything thrown while starting that no check explains still ends in one sentence. */
export function onStartupRejection(rejection: PromiseRejectionEvent): void {
  rejection.preventDefault();
  void fatalExplained((startup) => startup.explainStartupError(rejection.reason));
}
