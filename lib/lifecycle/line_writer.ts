/**
 * The one writer of the process's lines (the access log on stdout, operational events on stderr),
 * whatever the runtime: a line never waits for the stream. Each runtime gives a sink that writes off
 * the caller's thread (Deno: `Deno.stdout.write`, which runs on a thread of the runtime's blocking
 * pool; Node: `process.stdout`, a non-blocking libuv pipe), and the writer keeps one write in flight
 * and what comes meanwhile queued, up to {@linkcode MAX_PENDING_CHARS}. A pipe nobody reads fills,
 * its write stays in flight, the queue fills, and from then each line is dropped and counted, never
 * waited for: the service goes on answering (deploy/README.md, "When a log cannot be written"). The
 * count is said once a write ends again (the stream takes lines: `onDropped`), and at stop if the
 * stream is still stuck then.
 *
 * @module
 */

/** Where a {@linkcode LineWriter} writes: one stream of one runtime. */
export interface LineSink {
  /**
   * Writes all of `text`, never blocking the caller's thread; settles once the stream has taken it,
   * rejects when it cannot take it at all (a pipe closed by its reader).
   */
  write(text: string): Promise<void>;
}

/** Lines that were not written, as {@linkcode LineWriterOptions.onDropped} is told of them. */
export interface DroppedLines {
  /** The stream's name: `stdout` or `stderr`. */
  stream: string;
  /** How many lines were dropped since the last report. */
  dropped: number;
  /** Whether this is the stop's report: lines the stream still had not taken when the process ended. */
  atStop: boolean;
}

/** Options of {@linkcode createLineWriter}. */
export interface LineWriterOptions {
  /** The stream's name in reports. */
  stream: string;
  /** The most characters queued behind the write in flight; {@linkcode MAX_PENDING_CHARS} by default. */
  maxPending?: number;
  /** Told the count of dropped lines once the stream takes lines again, and at stop. */
  onDropped?: (report: DroppedLines) => void;
}

/** What {@linkcode createLineWriter} returns. */
export interface LineWriter {
  /**
   * Queues `text`, whole lines each ending in a new line, to be written in order; drops and counts
   * them when more than the bound waits already. Never blocks, never throws.
   */
  write(text: string): void;
  /** Resolves true once everything queued so far is written (or failed), false after `ms` if not. */
  settle(ms: number): Promise<boolean>;
  /** Whether nothing is queued or in flight. */
  readonly idle: boolean;
  /**
   * The stop's report: the lines dropped and not yet said, and those still queued or in flight,
   * told to `onDropped` (with `atStop`) when there are any; returns their count.
   */
  reportAtStop(): number;
}

/**
 * The most characters a writer queues behind its write in flight: about a second of the access log
 * at 7,000 requests a second (150 characters a line), 2 MiB of memory at most per stream, on top of
 * the 64 KiB a pipe itself holds. A reader that pauses for less loses nothing.
 */
export const MAX_PENDING_CHARS = 1_048_576;

/** How many lines `text` holds: its new lines, and a last line without one. */
export function countLines(text: string): number {
  let lines = 0;
  for (let at = text.indexOf("\n"); at !== -1; at = text.indexOf("\n", at + 1)) lines++;
  return text.length > 0 && !text.endsWith("\n") ? lines + 1 : lines;
}

/**
 * Creates the writer of one stream over `sink`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const written: string[] = [];
 * const stuck = Promise.withResolvers<void>();
 * // The first write stays in flight until the stream takes it: a pipe nobody reads for a while.
 * const sink = {
 *   write: (text: string) => written.push(text) === 1 ? stuck.promise : Promise.resolve(),
 * };
 * const reports: number[] = [];
 * const out = createLineWriter(sink, {
 *   stream: "stdout",
 *   maxPending: 10,
 *   onDropped: (report) => reports.push(report.dropped),
 * });
 * out.write("first\n"); // in flight
 * out.write("queued\n"); // waits behind it (7 characters of 10)
 * out.write("dropped\n"); // 15 would wait: dropped, counted
 * stuck.resolve();
 * assert.equal(await out.settle(1000), true);
 * assert.deepEqual(written, ["first\n", "queued\n"]);
 * assert.deepEqual(reports, [1]); // said once the stream took a write again
 * ```
 */
export function createLineWriter(sink: LineSink, options: LineWriterOptions): LineWriter {
  const maxPending = options.maxPending ?? MAX_PENDING_CHARS;
  let pending = "";
  let inFlight: string | undefined;
  let dropped = 0;
  let idle: Array<() => void> = [];

  const report = (atStop: boolean, count: number) => {
    if (count > 0) options.onDropped?.({ stream: options.stream, dropped: count, atStop });
  };
  const ended = (took: boolean) => {
    if (!took) dropped += countLines(inFlight ?? "");
    inFlight = undefined;
    // The stream took a write: it works again, and what it missed meanwhile is said (the report
    // may itself be a line queued here).
    if (took && dropped > 0) {
      const count = dropped;
      dropped = 0;
      report(false, count);
    }
    pump();
  };
  const pump = () => {
    if (inFlight !== undefined) return;
    if (pending === "") {
      for (const resolve of idle.splice(0)) resolve();
      return;
    }
    inFlight = pending;
    pending = "";
    let write: Promise<void>;
    try {
      write = sink.write(inFlight);
    } catch {
      write = Promise.reject();
    }
    write.then(() => ended(true), () => ended(false));
  };

  return {
    write(text) {
      if (inFlight !== undefined && pending.length + text.length > maxPending) {
        dropped += countLines(text);
        return;
      }
      pending += text;
      pump();
    },
    settle(ms) {
      if (inFlight === undefined && pending === "") return Promise.resolve(true);
      return idleWithin(idle, ms);
    },
    get idle() {
      return inFlight === undefined && pending === "";
    },
    reportAtStop() {
      const count = dropped + countLines(inFlight ?? "") + countLines(pending);
      dropped = 0;
      idle = [];
      report(true, count);
      return count;
    },
  };
}

/**
 * Resolves true when one of `waiters` is called (the writer is idle), false after `ms` if not.
 */
function idleWithin(waiters: Array<() => void>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const state: { settled: boolean; timer?: ReturnType<typeof setTimeout> } = { settled: false };
    const done = (written: boolean) => {
      state.settled = true;
      clearTimeout(state.timer);
      resolve(written);
    };
    // Waiting first: the first read of `setTimeout` loads Node's timers, and the pending writes
    // may end meanwhile (lib/timer.ts).
    waiters.push(() => done(true));
    state.timer = setTimeout(() => done(false), ms);
    if (state.settled) clearTimeout(state.timer);
  });
}

/**
 * How long a stop waits for each stream to take what is queued: time enough for a reader that
 * reads, and no more for one that does not (the stop's 4 s deadline holds it all, after the 1 s
 * drain).
 */
export const STOP_SETTLE_MS = 500;

/**
 * How long a stop past its deadline waits for each stream: a moment for the last lines of a reader
 * that reads, keeping the whole stop within Deno Deploy's 5 s (4 s deadline).
 */
export const DEADLINE_SETTLE_MS = 200;

/**
 * The stop's end of the process's streams: waits up to `ms` for both to take what is queued, says
 * what stdout could not take (on stderr), waits for stderr again, and says what stderr could not
 * (on stderr itself: heard only if it takes lines again before the exit).
 */
export async function endLines(
  streams: { stdout: LineWriter; stderr: LineWriter },
  ms: number = STOP_SETTLE_MS,
): Promise<void> {
  await Promise.all([streams.stdout.settle(ms), streams.stderr.settle(ms)]);
  if (streams.stdout.reportAtStop() > 0) await streams.stderr.settle(ms);
  streams.stderr.reportAtStop();
}
