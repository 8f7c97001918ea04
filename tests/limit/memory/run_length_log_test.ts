/**
 * Tests of the run-length sliding log of one caller (`lib/limit/memory/run_length_log.ts`): it holds what a log of one
 * timestamp per request holds, and its length is bounded by the distinct times in the window, not
 * by the number of requests.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import {
  add,
  countOf,
  keepNewest,
  liveAfter,
  oldestOf,
  RUN_MARK,
  type RunLog,
  TIME_FLOOR,
  trim,
  twoRequests,
} from "../../../lib/limit/memory/run_length_log.ts";

/** The timestamps a log stands for, one per request, oldest first (decoded from its layout). */
function expand(log: RunLog): number[] {
  const times: number[] = [];
  for (let i = log[1]!; i < log.length; i++) {
    const cell = log[i]!;
    if (cell > TIME_FLOOR) times.push(cell);
    else for (let k = 0; k < RUN_MARK - cell; k++) times.push(times.at(-1)!);
  }
  return times;
}

Deno.test("a hot caller's log stays bounded by the window's milliseconds, not by its requests", () => {
  const windowMs = 1_000;
  const log = twoRequests(0, 0);
  // 30 requests per millisecond for 10 s: 300,000 requests, all counted (a limit of a million).
  for (let t = 0; t < 10_000; t++) {
    trim(log, t - windowMs);
    for (let i = 0; i < 30; i++) add(log, t);
    assert.ok(log.length <= 2 + 2 * 2 * windowMs, `length ${log.length} at ${t} ms`);
  }
  assert.equal(countOf(log), 30 * windowMs); // the 1,000 ms in (8,999, 9,999]
});

Deno.test("property: runs hold exactly the timestamps a one-entry-per-request log holds", () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.oneof(
          fc.record({ op: fc.constant("add" as const), gap: fc.integer({ min: -50, max: 30 }) }),
          fc.record({ op: fc.constant("trim" as const), back: fc.integer({ min: 0, max: 200 }) }),
          fc.record({ op: fc.constant("keep" as const), limit: fc.integer({ min: 1, max: 20 }) }),
        ),
        { maxLength: 300 },
      ),
      (ops) => {
        // Absolute milliseconds, as the memory store keeps them: the log holds doubles.
        let now = 1_700_000_000_000;
        const log = twoRequests(now, now - 3);
        let model = [now - 3, now];
        for (const step of ops) {
          if (step.op === "add") {
            now += step.gap;
            add(log, now);
            model.push(now);
            model.sort((a, b) => a - b);
          } else if (step.op === "trim") {
            trim(log, now - step.back);
            model = model.filter((t) => t > now - step.back);
          } else if (model.length > step.limit) {
            keepNewest(log, step.limit);
            model = model.slice(model.length - step.limit);
          }
          assert.deepEqual(expand(log), model);
          assert.equal(countOf(log), model.length);
          assert.equal(oldestOf(log), model[0]);
          const cutoff = now - 40;
          const inside = model.filter((t) => t > cutoff);
          assert.deepEqual(
            liveAfter(log, cutoff),
            inside.length === 0
              ? { count: 0, oldest: 0 }
              : { count: inside.length, oldest: inside[0] },
          );
        }
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("a caller with each request in its own millisecond costs one cell per request", () => {
  const limit = 60;
  const log = twoRequests(0, 1);
  for (let t = 2; t < limit; t++) add(log, t);
  assert.equal(countOf(log), limit);
  // The total and head cells, then one timestamp per request: no count beside a lone request.
  assert.equal(log.length, 2 + limit);
  add(log, limit - 1); // a repeated millisecond: one count cell
  assert.equal(log.length, 2 + limit + 1);
  assert.deepEqual(expand(log).slice(-2), [limit - 1, limit - 1]);
});
