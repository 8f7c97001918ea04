/**
 * Tests of the memory store's pooled logs (`lib/limit/memory/log_pool.ts`): each entry's ring holds exactly
 * the timestamps a plain sorted list would, across growth, shrinking, out-of-order times and reuse of
 * segments by other entries; chunks are given back once callers leave.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import { LogPool, MAX_POOLED } from "../../../lib/limit/memory/log_pool.ts";

const T0 = 1_700_000_000_000;

Deno.test("property: every entry's pooled log holds what a sorted list of its times holds", () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.tuple(
          fc.integer({ min: 0, max: 5 }),
          fc.constantFrom("push", "push", "push", "trim", "drop", "clear"),
          // Mostly forward, sometimes back (a clock that stepped back), sometimes a burst.
          fc.oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: -80, max: -1 })),
          fc.integer({ min: 1, max: 40 }),
        ),
        { maxLength: 300 },
      ),
      (steps) => {
        const pool = new LogPool(6);
        const model: number[][] = Array.from({ length: 6 }, () => []);
        let now = T0;
        for (const [id, action, gap, n] of steps) {
          now += gap;
          const list = model[id]!;
          if (action === "push") {
            for (let k = 0; k < n && list.length < MAX_POOLED; k++) {
              if (list.length === 0) {
                list.push(now, now);
                pool.start(id, now, now);
              } else {
                assert.equal(pool.push(id, now), true);
                list.push(now);
              }
              list.sort((a, b) => a - b);
            }
          } else if (action === "trim" && list.length > 0) {
            const cutoff = now - 200;
            const left = list.filter((t) => t > cutoff);
            assert.equal(pool.trim(id, cutoff), left.length);
            model[id] = left;
          } else if (action === "drop" && list.length > 1) {
            const k = Math.min(n, list.length - 1);
            pool.dropOldest(id, k);
            model[id] = list.slice(k);
          } else if (action === "clear") {
            pool.clear(id);
            model[id] = [];
          }
          for (let e = 0; e < 6; e++) {
            assert.deepEqual(pool.count(e) === 0 ? [] : pool.times(e), model[e]);
          }
        }
        const total = model.reduce((sum, list) => sum + list.length, 0);
        assert.equal(pool.stats().timestamps, total);
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("a full pooled log refuses one more time and keeps what it holds", () => {
  const pool = new LogPool(1);
  pool.start(0, T0, T0 + 1);
  for (let i = 2; i < MAX_POOLED; i++) assert.equal(pool.push(0, T0 + i), true);
  assert.equal(pool.push(0, T0 + MAX_POOLED), false);
  assert.equal(pool.count(0), MAX_POOLED);
  assert.equal(pool.oldest(0), T0);
});

Deno.test("the pool counts the pages its logs touch, and gives chunks back once they are empty", () => {
  const callers = 40_000;
  const pool = new LogPool(callers);
  const bookkeeping = callers * 9;
  for (let id = 0; id < callers; id++) pool.start(id, T0, T0 + 1);
  const rings = Math.ceil((callers * 4 * 8) / 4096) * 4096; // rings of 4 float64s, whole pages
  assert.deepEqual(pool.stats(), {
    logs: callers,
    timestamps: 2 * callers,
    bytes: rings + bookkeeping,
  });
  // Half the callers grow to rings of 8: pages of both classes are touched.
  for (let id = 0; id < callers / 2; id++) for (let k = 0; k < 3; k++) pool.push(id, T0 + 2 + k);
  const both = rings + Math.ceil((callers / 2) * 8 * 8 / 4096) * 4096 + bookkeeping;
  assert.equal(pool.stats().bytes, both);
  // The freed rings of 4 are reused before any page never touched.
  for (let id = 0; id < callers / 2; id++) pool.clear(id);
  for (let id = 0; id < callers / 2; id++) pool.start(id, T0, T0 + 1);
  assert.equal(pool.stats().bytes, both, "an empty chunk stays until the sweep releases it");
  pool.release(); // the rings of 8 are all empty: their chunk is given back
  assert.equal(pool.stats().bytes, rings + bookkeeping);
  for (let id = 0; id < callers; id++) pool.clear(id);
  pool.release();
  assert.deepEqual(pool.stats(), { logs: 0, timestamps: 0, bytes: bookkeeping });
  pool.start(0, T0, T0 + 1); // and a class takes a chunk again when it needs one
  assert.equal(pool.stats().bytes, 4096 + bookkeeping);
});
