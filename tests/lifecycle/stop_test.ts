/**
 * The stop sequence of every entry (`lib/lifecycle/stop.ts`), called in process with stand-in parts:
 * a step that fails is one JSON error line, the steps after it still run, and the exit is 1; a stop
 * whose steps all succeed says "stopped" and exits 0. (Each entry's real stop is tested on real
 * processes: tests/server/serve_stop_test.ts, tests/node/node_test.ts, tests/main_test.ts.)
 *
 * @module
 */

import assert from "node:assert/strict";
import { type EventLevel, useEventOutput } from "../../lib/lifecycle/events.ts";
import { createLineWriter } from "../../lib/lifecycle/line_writer.ts";
import { createLifecycle, stopGracefully, type StopParts } from "../../lib/lifecycle/stop.ts";

/** Runs a stop with parts whose steps are those given, and answers what it did and said. */
async function stopWith(steps: Partial<Pick<StopParts, "shutdown" | "closeStore">>) {
  const done: string[] = [];
  const said: Array<{ level: EventLevel; message: string; error?: string }> = [];
  useEventOutput({
    event: (level, line) => said.push({ level, ...JSON.parse(line) }),
    fatal: (text) => Promise.reject(new Error(text)),
  });
  const sink = { write: () => Promise.resolve() };
  let exited: number | undefined;
  await stopGracefully(createLifecycle(), "SIGTERM", {
    drain: () => void done.push("drain"),
    shutdown: steps.shutdown ?? (() => Promise.resolve(void done.push("shutdown"))),
    closeAll: () => void done.push("closeAll"),
    flushAccessLog: () => void done.push("flushAccessLog"),
    closeStore: steps.closeStore ?? (() => void done.push("closeStore")),
    lines: {
      stdout: createLineWriter(sink, { stream: "stdout" }),
      stderr: createLineWriter(sink, { stream: "stderr" }),
    },
    exit: (code) => void (exited = code),
  });
  return { done, said, exited };
}

Deno.test("stop: every step done, 'stopped', exit 0", async () => {
  const { done, said, exited } = await stopWith({});
  assert.deepEqual(done, ["drain", "shutdown", "flushAccessLog", "closeStore"]);
  assert.deepEqual(said.map((line) => line.message).at(-1), "stopped");
  assert.equal(exited, 0);
});

Deno.test("stop: a store whose close fails is one error line naming it, the stop ends, exit 1", async () => {
  const { done, said, exited } = await stopWith({
    closeStore: () => Promise.reject(new Error("last batch refused")),
  });
  assert.deepEqual(done, ["drain", "shutdown", "flushAccessLog"]);
  const errors = said.filter((line) => line.level === "error");
  assert.equal(errors.length, 2, JSON.stringify(said));
  assert.match(errors[0]!.message, /^closing the rate-limit store failed at stop/);
  assert.match(errors[0]!.error!, /last batch refused/);
  assert.equal(errors[1]!.message, "stopped after an error");
  assert.equal(exited, 1);
});

Deno.test("stop: a shutdown that fails closes every connection, still closes the store, exit 1", async () => {
  const { done, said, exited } = await stopWith({
    shutdown: () => Promise.reject(new Error("listener gone")),
  });
  assert.deepEqual(done, ["drain", "closeAll", "flushAccessLog", "closeStore"]);
  assert.match(
    said.find((line) => line.level === "error")!.message,
    /^the server's shutdown failed/,
  );
  assert.equal(exited, 1);
});
