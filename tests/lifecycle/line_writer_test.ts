/**
 * The line writer (lib/lifecycle/line_writer.ts) over a sink the test holds: a stream that takes
 * lines, one that takes none until released (a pipe nobody reads), one that fails (a closed pipe).
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  countLines,
  createLineWriter,
  type DroppedLines,
  endLines,
} from "../../lib/lifecycle/line_writer.ts";

/** A sink whose writes wait until the test releases them, in order. */
function stuckSink() {
  const written: string[] = [];
  const waiting: Array<{ text: string; release: () => void; fail: () => void }> = [];
  return {
    written,
    waiting,
    sink: {
      write: (text: string) =>
        new Promise<void>((resolve, reject) => {
          waiting.push({
            text,
            release: () => {
              written.push(text);
              resolve();
            },
            fail: () => reject(new Error("EPIPE")),
          });
        }),
    },
    /** Releases every write waiting now and those the releases start. */
    async releaseAll() {
      while (waiting.length > 0) {
        waiting.shift()!.release();
        await new Promise((resolve) => setTimeout(resolve, 0));
      }
    },
  };
}

Deno.test("countLines() counts new lines, and a last line without one", () => {
  assert.equal(countLines(""), 0);
  assert.equal(countLines("a\n"), 1);
  assert.equal(countLines("a\nb\n"), 2);
  assert.equal(countLines("a\nb"), 2);
});

Deno.test("a writer keeps the order of its lines, one write in flight and the rest in the next", async () => {
  const stream = stuckSink();
  const writer = createLineWriter(stream.sink, { stream: "stdout" });
  writer.write("1\n");
  writer.write("2\n");
  writer.write("3\n");
  assert.equal(stream.waiting.length, 1, "one write in flight");
  assert.equal(writer.idle, false);
  await stream.releaseAll();
  assert.deepEqual(stream.written, ["1\n", "2\n3\n"]);
  assert.equal(writer.idle, true);
  assert.equal(await writer.settle(10), true);
});

Deno.test("a stream that takes nothing: lines past the bound are dropped, counted, and said once when it takes a line again", async () => {
  const stream = stuckSink();
  const reports: DroppedLines[] = [];
  const writer = createLineWriter(stream.sink, {
    stream: "stdout",
    maxPending: 20,
    onDropped: (report) => reports.push(report),
  });
  writer.write("in flight\n");
  for (let i = 0; i < 10; i++) writer.write(`line ${i}\n`); // 7 characters each: two fit
  assert.equal(stream.waiting.length, 1);
  assert.deepEqual(reports, [], "nothing said while the stream takes nothing");
  assert.equal(await writer.settle(20), false, "settle gives up after its bound");
  await stream.releaseAll();
  assert.deepEqual(stream.written, ["in flight\n", "line 0\nline 1\n"]);
  assert.deepEqual(reports, [{ stream: "stdout", dropped: 8, atStop: false }]);
  writer.write("later\n");
  await stream.releaseAll();
  assert.equal(reports.length, 1, "said once");
});

Deno.test("a report may write on the writer that recovered (stderr's own count goes to stderr)", async () => {
  const stream = stuckSink();
  const writer = createLineWriter(stream.sink, {
    stream: "stderr",
    maxPending: 5,
    onDropped: (report) => writer.write(`dropped ${report.dropped}\n`),
  });
  writer.write("a\n");
  writer.write("bbbbbb\n");
  await stream.releaseAll();
  assert.deepEqual(stream.written, ["a\n", "dropped 1\n"]);
});

Deno.test("a write that fails (a closed pipe) counts its lines as dropped and the writer goes on", async () => {
  const stream = stuckSink();
  const reports: number[] = [];
  const writer = createLineWriter(stream.sink, {
    stream: "stdout",
    onDropped: (report) => reports.push(report.dropped),
  });
  writer.write("a\nb\n");
  writer.write("c\n");
  stream.waiting.shift()!.fail();
  await new Promise((resolve) => setTimeout(resolve, 0));
  await stream.releaseAll();
  assert.deepEqual(stream.written, ["c\n"]);
  assert.deepEqual(reports, [2]);
});

Deno.test("a sink that throws instead of rejecting is a failed write too", async () => {
  let calls = 0;
  const reports: number[] = [];
  const writer = createLineWriter({
    write: () => {
      if (++calls === 1) throw new Error("EBADF");
      return Promise.resolve();
    },
  }, { stream: "stdout", onDropped: (report) => reports.push(report.dropped) });
  writer.write("a\n");
  assert.equal(await writer.settle(100), true);
  writer.write("b\n");
  assert.equal(await writer.settle(100), true);
  assert.deepEqual(reports, [1]);
});

Deno.test("reportAtStop() says the lines dropped, in flight and queued, once", () => {
  const stream = stuckSink();
  const reports: DroppedLines[] = [];
  const writer = createLineWriter(stream.sink, {
    stream: "stdout",
    maxPending: 4,
    onDropped: (report) => reports.push(report),
  });
  writer.write("x\n"); // in flight
  writer.write("y\n"); // queued
  writer.write("zzz\n"); // dropped
  assert.equal(writer.reportAtStop(), 3);
  assert.deepEqual(reports, [{ stream: "stdout", dropped: 3, atStop: true }]);
  assert.equal(createLineWriter(stream.sink, { stream: "stderr" }).reportAtStop(), 0);
});

Deno.test("endLines() says on stderr what a stuck stdout could not take, within its bound", async () => {
  const stdoutStream = stuckSink();
  const said: string[] = [];
  const stderr = createLineWriter({
    write: (text) => (said.push(text), Promise.resolve()),
  }, { stream: "stderr" });
  const stdout = createLineWriter(stdoutStream.sink, {
    stream: "stdout",
    onDropped: (report) => stderr.write(`${report.stream} ${report.dropped} ${report.atStop}\n`),
  });
  stdout.write("a\nb\n");
  const started = Date.now();
  await endLines({ stdout, stderr }, 50);
  assert.ok(Date.now() - started < 1000);
  assert.deepEqual(said, ["stdout 2 true\n"]);
});
