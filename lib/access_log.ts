/**
 * The access log: one JSON line per request on stdout, written in batches.
 *
 * A synchronous write per request would cost more than answering it, so lines are gathered and
 * written together every `flushMs` or when the buffer is large; `flush` writes what is left (at
 * shutdown).
 *
 * @module
 */

import type { AccessRecord } from "./handler.ts";

/** Options of {@linkcode createAccessLog}. */
export interface AccessLogOptions {
  /** Most milliseconds a line waits before it is written (default 250). */
  flushMs?: number;
  /** Bytes gathered before an immediate write (default 64 KiB). */
  maxBuffer?: number;
}

/** An access log: `log` one record, `flush` the rest. */
export interface AccessLog {
  /** Queues one record. */
  log: (record: AccessRecord) => void;
  /** Writes every queued line now. */
  flush: () => void;
}

const ENCODER = new TextEncoder();

/** Formats one record as a JSON line (keys in a fixed order, so lines are easy to grep). */
export function formatAccessRecord(record: AccessRecord): string {
  return `{"time":"${record.time}","method":${JSON.stringify(record.method)},"path":${
    JSON.stringify(record.path)
  },"status":${record.status},"ms":${record.ms},"caller":"${record.caller}"}\n`;
}

/**
 * Creates a batched access log over a synchronous writer.
 *
 * @param write writes all of a chunk (e.g. to `Deno.stdout`)
 */
export function createAccessLog(
  write: (chunk: Uint8Array) => void,
  options: AccessLogOptions = {},
): AccessLog {
  const flushMs = options.flushMs ?? 250;
  const maxBuffer = options.maxBuffer ?? 65_536;
  let buffer = "";
  let timer: ReturnType<typeof setTimeout> | undefined;

  const flush = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    if (buffer === "") return;
    const chunk = ENCODER.encode(buffer);
    buffer = "";
    write(chunk);
  };

  return {
    log(record) {
      buffer += formatAccessRecord(record);
      if (buffer.length >= maxBuffer) {
        flush();
      } else if (timer === undefined) {
        const pending = setTimeout(flush, flushMs);
        Deno.unrefTimer(pending);
        timer = pending;
      }
    },
    flush,
  };
}

/** Writes all of `chunk` to a synchronous writer such as `Deno.stdout`. */
export function writeAll(writer: { writeSync(p: Uint8Array): number }, chunk: Uint8Array): void {
  let offset = 0;
  while (offset < chunk.length) offset += writer.writeSync(chunk.subarray(offset));
}
