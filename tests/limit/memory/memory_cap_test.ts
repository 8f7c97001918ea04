/**
 * Tests of the in-memory store at its tracked-caller cap, where one eviction iterator lives across
 * evictions: the caller added longest ago is always the one forgotten, whatever the sweep deleted
 * in between and however often the store filled and emptied.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import { MemoryStore } from "../../../lib/limit/memory/memory_store.ts";

const POLICY = { limit: 60, windowMs: 60_000 };
const T0 = 1_700_000_000_000;

/**
 * Caller `n` of the property below: an IPv4 address, a canonical IPv6 /64 key (both held as words
 * in the table's index, where a cap of 5 means 16 slots: collisions and wrap-around) or a name
 * (held by its string).
 */
function keyOf(n: number): string {
  if (n % 3 === 0) return `198.51.100.${n}`;
  if (n % 3 === 1) return `2001:0db8:0000:${n.toString(16).padStart(4, "0")}::/64`;
  return `k${n}`;
}

/** Whether the store still counts a request of `key` at `now`. */
function tracked(store: MemoryStore, key: string, now: number): boolean {
  return store.peek(key, now).remaining < POLICY.limit;
}

Deno.test("at the cap the store forgets callers in the order they were added, over many evictions", () => {
  const cap = 100;
  const store = new MemoryStore(POLICY, { sweep: false, maxCallers: cap });
  for (let i = 0; i < 10_000; i++) store.hit(`c${i}`, T0 + i);
  assert.deepEqual(store.stats(), { tracked: cap, evicted: 10_000 - cap });
  for (let i = 0; i < 10_000; i++) {
    assert.equal(tracked(store, `c${i}`, T0 + 10_000), i >= 10_000 - cap, `c${i}`);
  }
});

Deno.test("evictions stay in order when the sweep deletes callers and the store empties and refills", () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.oneof(
          fc.record({ op: fc.constant("hit" as const), key: fc.integer({ min: 0, max: 30 }) }),
          fc.record({ op: fc.constant("wait" as const), ms: fc.integer({ min: 1, max: 25_000 }) }),
          fc.record({ op: fc.constant("sweep" as const) }),
        ),
        { maxLength: 200 },
      ),
      (ops) => {
        const cap = 5;
        const store = new MemoryStore(POLICY, { sweep: false, maxCallers: cap });
        // The model: callers in the order they were added, with the time of their latest request.
        const model = new Map<string, number>();
        let now = T0;
        for (const step of ops) {
          if (step.op === "wait") now += step.ms;
          if (step.op === "sweep") {
            store.sweep(now, 1_000);
            for (const [key, last] of model) if (last <= now - POLICY.windowMs) model.delete(key);
          }
          if (step.op !== "hit") continue;
          const key = keyOf(step.key);
          const last = model.get(key);
          if (last === undefined || last <= now - POLICY.windowMs) {
            if (last === undefined && model.size >= cap) model.delete(model.keys().next().value!);
          }
          if (last === undefined) model.set(key, now);
          store.hit(key, now);
          if (last !== undefined) model.set(key, now);
          // After every request, the store tracks exactly the callers the model does.
          for (let k = 0; k <= 30; k++) {
            const other = keyOf(k);
            const latest = model.get(other);
            const expected = latest !== undefined && latest > now - POLICY.windowMs;
            assert.equal(tracked(store, other, now), expected, other);
          }
          assert.ok(store.stats().tracked <= cap);
        }
      },
    ),
    { numRuns: 200 },
  );
});
