/**
 * Tests of the in-memory store's caller table (`lib/limit/memory/caller_table.ts`): against a model (a `Map` in insertion order), finding, adding and removing callers
 * in tables small enough that probe runs collide, wrap around the index's end and are shifted back
 * on deletion.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import { CallerTable } from "../../../lib/limit/memory/caller_table.ts";

/** Caller `n` of a small universe: IPv4, canonical IPv6 /64 keys and other strings, mixed. */
function keyOf(n: number): string {
  const hex = (v: number) => v.toString(16).padStart(4, "0");
  if (n % 3 === 0) return `198.51.100.${n}`;
  if (n % 3 === 1) return `2001:0db8:${hex(n)}:${hex(n * 7919 & 0xffff)}::/64`;
  return `name-${n}`;
}

/** Adds `key` (absent) at `time`, as the store does: a find that misses, then an add. */
function addKey(table: CallerTable, key: string, time: number): number {
  assert.equal(table.find(key), -1, key);
  return table.add(time);
}

Deno.test("property: the table holds exactly the callers a model does, in the order they were added, through collisions and deletions", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 9 }),
      fc.integer(),
      fc.array(
        fc.oneof(
          fc.record({ op: fc.constant("add" as const), key: fc.integer({ min: 0, max: 40 }) }),
          fc.record({ op: fc.constant("remove" as const), key: fc.integer({ min: 0, max: 40 }) }),
          fc.record({ op: fc.constant("evict" as const) }),
        ),
        { maxLength: 300 },
      ),
      (capacity, seed, ops) => {
        // A tiny index (2 to 32 slots) for 41 keys: long probe runs that wrap around its end.
        const table = new CallerTable(capacity, seed);
        const model = new Map<string, number>(); // key -> its time, in insertion order
        let time = 0;
        for (const step of ops) {
          if (step.op === "evict") {
            const first = model.keys().next();
            assert.equal(table.oldest(), first.done ? -1 : table.find(first.value));
            if (!first.done) {
              table.remove(table.oldest());
              model.delete(first.value);
            }
          } else {
            const key = keyOf(step.key);
            const id = table.find(key);
            assert.equal(id >= 0, model.has(key), key);
            if (step.op === "remove" && id >= 0) {
              table.remove(id);
              model.delete(key);
            }
            if (step.op === "add" && id < 0 && model.size < capacity) {
              assert.equal(table.add(++time), table.find(key));
              model.set(key, time);
            }
          }
          assert.equal(table.size, model.size);
          for (let n = 0; n <= 40; n++) {
            const key = keyOf(n);
            const id = table.find(key);
            assert.equal(id >= 0 ? table.time[id] : undefined, model.get(key), key);
          }
        }
      },
    ),
    { numRuns: 500 },
  );
});

Deno.test("a probe run that wraps around the index's end is shifted back across it when a caller leaves", () => {
  const table = new CallerTable(8, 12345); // 16 slots
  const slots = table.probe(keyOf(1)).slots;
  // Canonical keys whose home is the last slot, found by trying keys in turn.
  const last: string[] = [];
  for (let n = 0; last.length < 3 && n < 100_000; n++) {
    const key = keyOf(3 * n + 1);
    if (table.probe(key).home === slots - 1) last.push(key);
  }
  assert.equal(last.length, 3);
  for (const key of last) addKey(table, key, 1);
  assert.deepEqual(last.map((key) => table.probe(key).slot), [slots - 1, 0, 1]);
  table.remove(table.find(last[0]!)); // the hole is at the end: both others move back across it
  assert.equal(table.find(last[0]!), -1);
  assert.deepEqual(last.slice(1).map((key) => table.probe(key).slot), [slots - 1, 0]);
  table.remove(table.find(last[2]!));
  assert.deepEqual(table.probe(last[1]!).slot, slots - 1);
});

Deno.test("a table removes every caller without leaving tombstones: probes stop at the first empty slot", () => {
  const table = new CallerTable(1000, 7);
  for (let round = 0; round < 50; round++) {
    for (let n = 0; n < 1000; n++) addKey(table, keyOf(3 * n + 1 + round * 3000), n);
    for (let n = 999; n >= 0; n--) table.remove(table.find(keyOf(3 * n + 1 + round * 3000)));
  }
  assert.equal(table.size, 0);
  // An empty index: every key's home slot is empty, so it is not found and not placed elsewhere.
  for (let n = 0; n < 100; n++) {
    const key = keyOf(3 * n + 1);
    assert.equal(table.find(key), -1);
    addKey(table, key, n);
    assert.equal(table.probe(key).slot, table.probe(key).home, key);
    table.remove(table.find(key));
  }
  assert.equal(table.top, 1000, "entries are reused: no more are touched than were held at once");
});

Deno.test("a full table refuses another caller", () => {
  const table = new CallerTable(2);
  addKey(table, "192.0.2.1", 1);
  addKey(table, "other", 1);
  assert.equal(table.find("192.0.2.2"), -1);
  assert.throws(() => table.add(1), RangeError);
  assert.throws(() => new CallerTable(0), RangeError);
});
