/**
 * Node's output: the writers of stdout (the access log) and stderr (operational events), which never
 * block (`lib/lifecycle/line_writer.ts`), and the event output `main.ts` installs
 * (`lib/lifecycle/events.ts`).
 *
 * The lines go through `process.stdout` and `process.stderr`: on a pipe, libuv's non-blocking
 * stream, which queues what the pipe cannot take yet and never stops the event loop (`fs.writeSync`
 * on the descriptor would: it blocks on a blocking pipe, and fails with `EAGAIN` on the non-blocking
 * one Node makes of it; measured: tests/bench/README.md, "Logs that cannot be written"). A file is
 * written synchronously by Node, a terminal too; neither fills.
 *
 * @module
 */

import process from "node:process";
import { droppedLinesEvent, type EventOutput, useEventOutput } from "../lifecycle/events.ts";
import { createLineWriter, type LineSink, type LineWriter } from "../lifecycle/line_writer.ts";

/**
 * How long a failed start waits for stderr to take its sentence (and the events before it): a
 * reader that reads takes it in a moment; one that does not must not hold the exit.
 */
const FATAL_SETTLE_MS = 1000;

/** The standard streams a sink writes to. */
type StreamOf = () => NodeJS.WriteStream;

/**
 * A sink over one of Node's standard streams, opened at its first line (opening `process.stdout`
 * makes its pipe non-blocking, and no line may need it).
 */
function sinkOf(streamOf: StreamOf): LineSink {
  let stream: NodeJS.WriteStream | undefined;
  return {
    write(text) {
      if (stream === undefined) {
        stream = streamOf();
        // A write's error (a pipe its reader closed: EPIPE) is the write's: it rejects below. Not
        // listened for, Node would throw it as the stream's unhandled `error` event.
        stream.on("error", () => {});
      }
      const to = stream;
      return new Promise((resolve, reject) =>
        to.write(text, (error) => error ? reject(error) : resolve())
      );
    },
  };
}

/** The access log's writer (stdout). */
export const STDOUT_LINES: LineWriter = createLineWriter(sinkOf(() => process.stdout), {
  stream: "stdout",
  onDropped: droppedLinesEvent,
});

/** The operational events' writer (stderr). */
export const STDERR_LINES: LineWriter = createLineWriter(sinkOf(() => process.stderr), {
  stream: "stderr",
  onDropped: droppedLinesEvent,
});

/** Node's event output: a JSON line on stderr. */
export const NODE_EVENTS: EventOutput = {
  event(_level, line) {
    STDERR_LINES.write(line);
  },
  async fatal(text) {
    STDERR_LINES.write(`${text}\n`);
    await STDERR_LINES.settle(FATAL_SETTLE_MS);
    process.exit(1);
  },
};

/** Makes Node's output the process's (`main.ts`, first thing). */
export function useNodeEvents(): void {
  useEventOutput(NODE_EVENTS);
}
