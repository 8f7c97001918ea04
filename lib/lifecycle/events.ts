/**
 * The process's operational events, written once for every entry: a JSON line each (`time`,
 * `level`, `message`, fields), an error's fields with its secrets redacted, and the start-up
 * failures that end in one sentence and exit 1. Where the lines go is the entry's: it installs its
 * runtime's {@linkcode EventOutput} first thing (Deno's `lib/server/output.ts`, Node's
 * `lib/node/output.ts`, the Worker's console), and every module then calls {@linkcode event}.
 *
 * @module
 */

import { formatConfigErrors, redactSecrets } from "../config/messages.ts";
import { namedMessageOf } from "../text/error_message.ts";
import type { DroppedLines } from "./line_writer.ts";

/** An event's level. */
export type EventLevel = "info" | "warn" | "error";

/** Where an entry's events go. */
export interface EventOutput {
  /** Writes one event's JSON line (`line` ends with a new line) without ever blocking. */
  event(level: EventLevel, line: string): void;
  /**
   * Says a start-up failure's text whole, waiting a bounded time for the stream to take it (and the
   * events before it), then exits 1.
   */
  fatal(text: string): Promise<never>;
}

/**
 * Where events go until an entry installs its output: the console (a test that runs a module of
 * an entry without the entry). A failure still ends the start, by throwing its text.
 */
const CONSOLE_OUTPUT: EventOutput = {
  event(level, line) {
    // deno-lint-ignore no-console -- no entry installed an output: a test's own process
    console[level](line.trimEnd());
  },
  fatal(text) {
    return Promise.reject(new Error(text));
  },
};

let output: EventOutput = CONSOLE_OUTPUT;

/** Makes `installed` the process's event output (each entry, at its start). */
export function useEventOutput(installed: EventOutput): void {
  output = installed;
}

/**
 * One event's JSON line, with its new line.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const line = eventLine("warn", "careful", { limit: 60 }, new Date(0));
 * assert.equal(line, '{"time":"1970-01-01T00:00:00.000Z","level":"warn","message":"careful","limit":60}\n');
 * ```
 */
export function eventLine(
  level: EventLevel,
  message: string,
  fields: Record<string, unknown> = {},
  now: Date = new Date(),
): string {
  return `${JSON.stringify({ time: now.toISOString(), level, message, ...fields })}\n`;
}

/** Writes one operational event where the entry's output sends it (a JSON line on stderr). */
export function event(
  level: EventLevel,
  message: string,
  fields: Record<string, unknown> = {},
): void {
  output.event(level, eventLine(level, message, fields));
}

/**
 * An error's fields in an event: name, message and stack, secrets redacted.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const fields = errorFields(new Error("redis://user:hunter2@host refused"));
 * assert.equal(fields.error, "Error: redis://user:***@host refused");
 * ```
 */
export function errorFields(error: unknown): Record<string, unknown> {
  return {
    error: redactSecrets(namedMessageOf(error)),
    stack: error instanceof Error && error.stack ? redactSecrets(error.stack) : undefined,
  };
}

/** Says the configuration's problems, one sentence each, and exits 1. */
export function fatal(errors: readonly string[]): Promise<never> {
  return output.fatal(formatConfigErrors(errors));
}

/** Says one sentence (secrets redacted: it may quote `REDIS_URL` whole) and exits 1. */
export function fatalSentence(sentence: string): Promise<never> {
  return output.fatal(redactSecrets(sentence));
}

/**
 * The event of lines a stream could not take (`line_writer.ts`): said once the stream takes lines
 * again, or at stop while it still does not.
 */
export function droppedLinesEvent(report: DroppedLines): void {
  event(
    "warn",
    report.atStop
      ? `${report.stream} lines dropped: the stream still took no line at stop (a pipe nobody reads)`
      : `${report.stream} lines dropped: the stream took no line for a while (a pipe nobody read), writing again now`,
    { dropped: report.dropped, stream: report.stream },
  );
}
