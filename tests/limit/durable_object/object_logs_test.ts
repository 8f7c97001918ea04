/**
 * The Durable Object's logs (`lib/limit/durable_object/object_logs.ts`): the exact sliding log held to the model
 * every store is held to, through restarts that read the stored values back; the cap on
 * timestamps per object and what it forgets; the idle sweep; damaged stored values.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import {
  CallerLogs,
  checkDurablePolicy,
  DURABLE_MAX_LIMIT,
  type LogChange,
  logOfStored,
  maxCallersOf,
  OBJECT_MAX_TIMESTAMPS,
} from "../../../lib/limit/durable_object/object_logs.ts";
import { SlidingLogModel } from "../_sliding_log_model.ts";

const T0 = 1_800_000_000_000;

/** An object's storage as the object writes it: one `Float64Array` per caller. */
class Storage {
  readonly values = new Map<string, unknown>();
  apply(changes: LogChange[]): void {
    for (const { key, log } of changes) {
      if (log === undefined) this.values.delete(key);
      else this.values.set(key, Float64Array.from(log));
    }
  }
  /** The object after a restart: its logs read back from storage. */
  restart(): CallerLogs {
    const logs = new CallerLogs();
    for (const [key, value] of this.values) logs.load(key, logOfStored(value));
    return logs;
  }
}

Deno.test("CallerLogs decides as an exact sliding log, through restarts, sweeps and a clock that steps back", () => {
  const callers = ["192.0.2.1", "192.0.2.2", "2001:db8:0:1e::/64"];
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 5 }),
      fc.array(
        fc.tuple(
          fc.integer({ min: 0, max: callers.length - 1 }),
          fc.oneof(fc.integer({ min: 0, max: 3_000 }), fc.integer({ min: -12_000, max: -1 })),
          fc.constantFrom("hit", "hit", "peek", "sweep", "restart"),
        ),
        { maxLength: 200, size: "max" },
      ),
      (limit, steps) => {
        const policy = { limit, windowMs: 10_000 };
        const model = new SlidingLogModel(policy, { keepNewest: true });
        const storage = new Storage();
        let logs = new CallerLogs();
        let now = T0;
        for (const [index, gap, action] of steps) {
          now += gap;
          const key = callers[index]!;
          if (action === "sweep") {
            const { removed } = logs.sweep(now, policy.windowMs);
            storage.apply(removed.map((key) => ({ key, log: undefined })));
            model.sweep(now);
          } else if (action === "restart") {
            logs = storage.restart();
          } else if (action === "peek") {
            model.peek(key, now, logs.peek(key, now, policy));
          } else {
            const { decision, changes } = logs.hit(key, now, policy);
            storage.apply(changes);
            model.hit(key, now, decision);
          }
          assert.ok(logs.timestamps <= callers.length * limit);
        }
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("a caller kept in memory only is decided as an exact sliding log while the object lives; storage never holds it, its next request writes its whole log, and a restart loses its one unwritten hit only", () => {
  const callers = ["2001:db8:1:1::/64", "2001:db8:1:2::/64", "192.0.2.1"];
  let kept = 0;
  let lost = 0;
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 5 }),
      fc.array(
        fc.tuple(
          fc.integer({ min: 0, max: callers.length - 1 }),
          fc.integer({ min: 0, max: 3_000 }),
          fc.constantFrom("hit", "hit in memory", "hit in memory", "peek", "sweep", "restart"),
        ),
        { maxLength: 200, size: "max" },
      ),
      (limit, steps) => {
        const policy = { limit, windowMs: 10_000 };
        const model = new SlidingLogModel(policy, { keepNewest: true });
        const storage = new Storage();
        let logs = new CallerLogs();
        /** The callers kept in memory only, as the object's rule says. */
        const inMemory = new Set<string>();
        let now = T0;
        for (const [index, gap, action] of steps) {
          now += gap;
          const key = callers[index]!;
          if (action === "sweep") {
            const { removed } = logs.sweep(now, policy.windowMs);
            assert.ok(removed.every((key) => !inMemory.has(key)), "nothing stored to remove");
            storage.apply(removed.map((key) => ({ key, log: undefined })));
            model.sweep(now);
            // A caller kept in memory and swept is forgotten with nothing stored: new again.
            for (const key of inMemory) if (!logs.has(key)) inMemory.delete(key);
          } else if (action === "restart") {
            logs = storage.restart();
            for (const key of inMemory) model.forget(key), lost++;
            inMemory.clear();
          } else if (action === "peek") {
            model.peek(key, now, logs.peek(key, now, policy));
          } else {
            const held = logs.has(key);
            const { decision, changes } = logs.hit(key, now, policy, action === "hit in memory");
            storage.apply(changes);
            model.hit(key, now, decision);
            if (!held && action === "hit in memory") inMemory.add(key), kept++;
            else if (inMemory.delete(key)) {
              assert.ok(changes.some((change) => change.key === key), "its return writes it");
            }
          }
          for (const key of inMemory) assert.equal(storage.values.has(key), false, key);
          assert.equal(logs.unwritten, inMemory.size);
        }
      },
    ),
    { numRuns: 300 },
  );
  // The runs reached what is under test: callers kept in memory, and hits lost to a restart.
  assert.ok(kept > 300 && lost > 100, `${kept} kept in memory, ${lost} lost`);
});

Deno.test("a caller kept in memory gets 60 of 100 with the fields a written one gets; its first request writes nothing, its second its whole log, and it is never swept from storage it is not in", () => {
  const policy = { limit: 60, windowMs: 60_000 };
  const written = new CallerLogs();
  const logs = new CallerLogs();
  const storage = new Storage();
  for (let i = 0; i < 100; i++) {
    const expected = written.hit("2001:db8:0:1::/64", T0 + i * 10, policy);
    const { decision, changes } = logs.hit("2001:db8:0:1::/64", T0 + i * 10, policy, true);
    assert.deepEqual(decision, expected.decision, `request ${i + 1}`);
    if (i === 0) assert.deepEqual(changes, [], "the first request writes nothing");
    if (i === 1) {
      assert.deepEqual(changes, [{ key: "2001:db8:0:1::/64", log: [T0, T0 + 10] }]);
    }
    storage.apply(changes);
  }
  assert.equal(logs.unwritten, 0);
  assert.deepEqual(
    storage.values.get("2001:db8:0:1::/64"),
    Float64Array.from(
      Array.from({ length: 60 }, (_, i) => T0 + i * 10),
    ),
  );
  // Kept in memory and never back: neither removed nor waited for by the sweep, yet forgotten.
  const alone = new CallerLogs();
  alone.hit("2001:db8:0:2::/64", T0, policy, true);
  alone.hit("192.0.2.7", T0 + 1000, policy);
  assert.deepEqual(alone.sweep(T0 + 1, 1), { removed: [], nextAt: T0 + 1001 });
  assert.equal(alone.has("2001:db8:0:2::/64"), false);
  assert.equal(alone.unwritten, 0);
  const onlyInMemory = new CallerLogs();
  onlyInMemory.hit("2001:db8:0:3::/64", T0, policy, true);
  assert.deepEqual(onlyInMemory.sweep(T0, 1_000), { removed: [], nextAt: undefined });
  assert.equal(onlyInMemory.callers, 1, "not idle yet: still held, with no alarm for it");
});

Deno.test("at the cap, a caller kept in memory is forgotten with no storage change, and a written one with its delete", () => {
  const policy = { limit: DURABLE_MAX_LIMIT, windowMs: 60_000 };
  const cap = maxCallersOf(policy);
  const logs = new CallerLogs();
  logs.hit("in-memory", T0, policy, true);
  for (let i = 1; i < cap; i++) logs.hit(`caller-${i}`, T0 + i, policy);
  const first = logs.hit("caller-new", T0 + cap, policy);
  assert.deepEqual(first.changes, [{ key: "caller-new", log: [T0 + cap] }]);
  assert.equal(logs.unwritten, 0);
  const second = logs.hit("caller-newer", T0 + cap + 1, policy, true);
  assert.deepEqual(second.changes, [{ key: "caller-1", log: undefined }]);
  assert.equal(logs.callers, cap);
});

Deno.test("CallerLogs admits 60 of 100 requests of one caller and writes only the admitted ones", () => {
  const logs = new CallerLogs();
  const policy = { limit: 60, windowMs: 60_000 };
  let admitted = 0;
  let writes = 0;
  for (let i = 0; i < 100; i++) {
    const { decision, changes } = logs.hit("192.0.2.1", T0 + i, policy);
    if (decision.allowed) admitted++;
    writes += changes.length;
  }
  assert.equal(admitted, 60);
  assert.equal(writes, 60);
  assert.deepEqual(logs.peek("192.0.2.1", T0 + 100, policy), {
    allowed: false,
    remaining: 0,
    resetSeconds: 60,
  });
});

Deno.test("an object holds at most OBJECT_MAX_TIMESTAMPS: the caller added longest ago is forgotten, and its stored log deleted", () => {
  const policy = { limit: DURABLE_MAX_LIMIT, windowMs: 60_000 };
  const cap = maxCallersOf(policy);
  assert.equal(cap, OBJECT_MAX_TIMESTAMPS / DURABLE_MAX_LIMIT);
  const logs = new CallerLogs();
  const storage = new Storage();
  for (let i = 0; i < cap; i++) storage.apply(logs.hit(`caller-${i}`, T0 + i, policy).changes);
  // The first caller, again: it keeps its place (least recently added, not least recently used).
  storage.apply(logs.hit("caller-0", T0 + cap, policy).changes);
  assert.equal(logs.callers, cap);
  const { changes } = logs.hit("caller-new", T0 + cap + 1, policy);
  assert.deepEqual(changes, [
    { key: "caller-0", log: undefined },
    { key: "caller-new", log: [T0 + cap + 1] },
  ]);
  storage.apply(changes);
  assert.equal(logs.callers, cap);
  assert.equal(storage.values.size, cap);
  assert.equal(storage.values.has("caller-0"), false);
  // Forgotten, the caller starts afresh.
  assert.equal(logs.hit("caller-0", T0 + cap + 2, policy).decision.remaining, policy.limit - 1);
});

Deno.test("the cap is in timestamps: full logs of the highest limit stay within OBJECT_MAX_TIMESTAMPS", () => {
  const policy = { limit: 2_500, windowMs: 60_000 };
  const logs = new CallerLogs();
  const cap = maxCallersOf(policy);
  for (let c = 0; c < cap + 3; c++) {
    for (let i = 0; i < policy.limit; i++) logs.hit(`caller-${c}`, T0 + i, policy);
  }
  assert.equal(logs.callers, cap);
  assert.equal(logs.timestamps, OBJECT_MAX_TIMESTAMPS);
});

Deno.test("a limit lowered under a live object keeps the newest timestamps of the new limit", () => {
  const logs = new CallerLogs();
  for (let i = 0; i < 5; i++) logs.hit("192.0.2.1", T0 + i * 1_000, { limit: 5, windowMs: 60_000 });
  const lowered = { limit: 2, windowMs: 60_000 };
  const { decision, changes } = logs.hit("192.0.2.1", T0 + 5_000, lowered);
  // Refused, and reset counts from the oldest of the two kept (T0 + 3 s): 58 s.
  assert.deepEqual(decision, { allowed: false, remaining: 0, resetSeconds: 58, resetMs: 58_000 });
  assert.deepEqual(changes, []);
  // The refusal keeps the older three: an isolate still on the higher limit counts them.
  assert.equal(logs.timestamps, 5);
  assert.equal(logs.hit("192.0.2.1", T0 + 63_001, lowered).decision.allowed, true);
  assert.equal(logs.timestamps, 2);
});

Deno.test("during a gradual deploy that raises the limit, a refusal by an isolate still on the lower one hands out no quota", () => {
  const logs = new CallerLogs();
  const raised = { limit: 100, windowMs: 60_000 };
  const old = { limit: 60, windowMs: 60_000 };
  let admitted = 0;
  for (let i = 0; i < 100; i++) {
    if (logs.hit("192.0.2.1", T0 + i, raised).decision.allowed) admitted++;
  }
  assert.equal(logs.hit("192.0.2.1", T0 + 100, old).decision.allowed, false);
  for (let i = 0; i < 100; i++) {
    if (logs.hit("192.0.2.1", T0 + 200 + i, raised).decision.allowed) admitted++;
  }
  // Every request within one window: the raised limit's 100, not 140.
  assert.equal(admitted, 100);
});

Deno.test("sweep() forgets callers with nothing left in the window and says when the next becomes idle", () => {
  const policy = { limit: 5, windowMs: 1_000 };
  const logs = new CallerLogs();
  logs.hit("a", T0, policy);
  logs.hit("b", T0 + 400, policy);
  logs.hit("a", T0 + 200, policy);
  assert.deepEqual(logs.sweep(T0 + 999, policy.windowMs), { removed: [], nextAt: T0 + 1_200 });
  assert.deepEqual(logs.sweep(T0 + 1_200, policy.windowMs), { removed: ["a"], nextAt: T0 + 1_400 });
  assert.deepEqual(logs.sweep(T0 + 1_400, policy.windowMs), { removed: ["b"], nextAt: undefined });
  assert.equal(logs.timestamps, 0);
});

Deno.test("a stored value that is not an ascending finite log reads back as an empty log", () => {
  for (
    const value of [
      undefined,
      null,
      [1, 2, 3],
      new Float64Array([3, 2]),
      new Float64Array([1, NaN]),
      new Float64Array([1, Infinity]),
      new Float64Array(DURABLE_MAX_LIMIT + 1),
      new Uint8Array(16),
    ]
  ) {
    assert.deepEqual(logOfStored(value), [], String(value));
  }
  assert.deepEqual(logOfStored(new Float64Array([T0, T0, T0 + 1])), [T0, T0, T0 + 1]);
});

Deno.test("checkDurablePolicy() refuses a limit or window the store cannot hold", () => {
  checkDurablePolicy({ limit: 60, windowMs: 60_000 });
  checkDurablePolicy({ limit: DURABLE_MAX_LIMIT, windowMs: 1_000 });
  for (
    const policy of [
      { limit: 0, windowMs: 60_000 },
      { limit: DURABLE_MAX_LIMIT + 1, windowMs: 60_000 },
      { limit: 1.5, windowMs: 60_000 },
      { limit: 60, windowMs: 999 },
      { limit: 60, windowMs: NaN },
      { limit: 60, windowMs: 86_400_001 },
    ]
  ) {
    assert.throws(() => checkDurablePolicy(policy), RangeError, JSON.stringify(policy));
  }
});

Deno.test("a window lengthened under a live object counts the hits it now covers, after a sweep and a restart too: no quota handed out", () => {
  const key = "192.0.2.1";
  const short = { limit: 2, windowMs: 1_000 };
  const long = { limit: 2, windowMs: 10_000 };
  const storage = new Storage();
  const logs = new CallerLogs();
  storage.apply(logs.hit(key, T0, short).changes);
  // The first hit has left the short window: admitted, and both hits are kept.
  const second = logs.hit(key, T0 + 1_500, short);
  assert.equal(second.decision.allowed, true);
  storage.apply(second.changes);
  assert.deepEqual(logOfStored(storage.values.get(key)), [T0, T0 + 1_500]);
  // The idle sweep (by default the longest window) keeps the caller.
  assert.deepEqual(logs.sweep(T0 + 3_000).removed, []);
  for (const decider of [logs, storage.restart()]) {
    assert.deepEqual(decider.hit(key, T0 + 2_000, long).decision, {
      allowed: false,
      remaining: 0,
      resetSeconds: 8,
      resetMs: 8_000,
    });
  }
  assert.equal(logs.hit(key, T0 + 10_001, long).decision.allowed, true);
});
