/**
 * The process's operational events on Node: JSON lines on stderr (stdout carries the access log),
 * as Deno's entry writes them (`lib/server/events.ts`), and the exits of a failed start (one
 * sentence, exit 1).
 *
 * Written with `fs.writeSync` on the descriptors, not `process.stderr`: Node makes a pipe's writes
 * asynchronous once that stream is opened, and `process.exit` would drop what is pending.
 *
 * @module
 */

import { writeSync } from "node:fs";
import process from "node:process";
import { formatConfigErrors, redactSecrets } from "../config.ts";
import { namedMessageOf } from "../text/error_message.ts";

const ENCODER = new TextEncoder();

/** Descriptors of the standard streams. */
export const STDOUT = 1;
const STDERR = 2;

/**
 * Writes all of `bytes` on descriptor `fd`, waiting a moment when it is a non-blocking pipe that is
 * full (`EAGAIN`), so that no line is cut or lost.
 */
export function writeAllSync(fd: number, bytes: Uint8Array): void {
  let offset = 0;
  while (offset < bytes.length) {
    try {
      offset += writeSync(fd, bytes, offset, bytes.length - offset);
    } catch (error) {
      if ((error as { code?: string }).code !== "EAGAIN") throw error;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }
}

/** One operational event as a JSON line on stderr. */
export function event(
  level: "info" | "warn" | "error",
  message: string,
  fields: Record<string, unknown> = {},
): void {
  const line = JSON.stringify({ time: new Date().toISOString(), level, message, ...fields });
  writeAllSync(STDERR, ENCODER.encode(`${line}\n`));
}

/** An error's fields in an event: name, message and stack, secrets redacted. */
export function errorFields(error: unknown): Record<string, unknown> {
  return {
    error: redactSecrets(namedMessageOf(error)),
    stack: error instanceof Error && error.stack ? redactSecrets(error.stack) : undefined,
  };
}

/** Prints the configuration's problems, one sentence each, and exits 1. */
export function fatal(errors: readonly string[]): never {
  writeAllSync(STDERR, ENCODER.encode(`${formatConfigErrors(errors)}\n`));
  process.exit(1);
}

/** Prints one sentence (secrets redacted: it may quote REDIS_URL whole) and exits 1. */
export function fatalSentence(sentence: string): never {
  writeAllSync(STDERR, ENCODER.encode(`${redactSecrets(sentence)}\n`));
  process.exit(1);
}
