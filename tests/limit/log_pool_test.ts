/**
 * Tests of the memory store's pooled logs (`lib/limit/log_pool.ts`): each entry's ring holds exactly
 * the timestamps a plain sorted list would, across growth, shrinking, out-of-order times and reuse of
 * segments by other entries; chunks are given back once callers leave.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { CHUNK_BYTES, LogPool, MAX_POOLED } from "../../lib/limit/log_pool.ts";

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

Deno.test("the pool takes chunks one at a time as logs arrive and gives them back as they leave", () => {
  const callers = 40_000; // rings of 4: 8,192 per chunk, so five chunks
  const pool = new LogPool(callers);
  for (let id = 0; id < callers; id++) pool.start(id, T0, T0 + 1);
  const full = pool.stats();
  assert.equal(full.logs, callers);
  const ringBytes = callers * 4 * 8;
  assert.ok(full.bytes >= ringBytes, `${full.bytes} bytes for ${ringBytes} of rings`);
  assert.ok(full.bytes <= ringBytes + CHUNK_BYTES + callers * 9, `${full.bytes} bytes`);
  for (let id = callers - 1; id >= 0; id--) pool.clear(id);
  // All gone but one spare chunk and the per-entry bookkeeping.
  assert.equal(pool.stats().bytes, CHUNK_BYTES + callers * 9);
  // Callers leaving in the order they came (oldest first) empty the last chunks too, since new
  // logs always fill the lowest chunk with room.
  for (let id = 0; id < callers; id++) pool.start(id, T0, T0 + 1);
  for (let id = 0; id < callers; id++) pool.clear(id);
  assert.equal(pool.stats().bytes, CHUNK_BYTES + callers * 9);
});
