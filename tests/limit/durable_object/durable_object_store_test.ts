/**
 * The Worker's side of the Durable Object store (`lib/limit/durable_object/durable_object_store.ts`), over a namespace
 * whose stubs answer thenables as a binding's do: a real Promise out, the object named by the
 * caller (or its shard), an answer that is not a decision refused, and the guard's failure policy
 * and timeout applied. The store on real workerd is `tests/workers/rate_limiter_object_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Decision, RateLimitPolicy } from "../../../lib/limit/core/decision.ts";
import type { StoreIncident } from "../../../lib/limit/guard/guarded_store.ts";
import {
  CANARIES,
  createDurableObjectStore,
  DurableObjectStore,
  MAX_SHARDS,
  type RateLimiterNamespace,
  type RateLimiterStub,
  shardOf,
} from "../../../lib/limit/durable_object/durable_object_store.ts";
import { CallerLogs, MAX_KEY_LENGTH } from "../../../lib/limit/durable_object/object_logs.ts";

const POLICY: RateLimitPolicy = { limit: 60, windowMs: 60_000 };

/** A thenable that is not a Promise, as a Durable Object's RPC result is. */
function thenable<T>(settle: () => T): PromiseLike<T> {
  return {
    then: (ok, fail) => new Promise<T>((resolve) => resolve(settle())).then(ok, fail),
  };
}

/**
 * A namespace of objects that decide with the real logs, one `CallerLogs` per object name, by
 * the test's clock, their answers cloned as an RPC clones them; `answer` replaces their answer
 * when set; an object named in `faults` throws as an overloaded object does, or never answers.
 */
class FakeNamespace implements RateLimiterNamespace<string> {
  readonly objects = new Map<string, CallerLogs>();
  readonly calls: string[] = [];
  readonly faults = new Map<string, "overloaded" | "stall">();
  answer: (() => unknown) | undefined;
  now = 1_800_000_000_000;
  idFromName(name: string): string {
    return name;
  }
  get(id: string): RateLimiterStub {
    const logs = this.objects.get(id) ?? new CallerLogs();
    this.objects.set(id, logs);
    const fault = this.faults.get(id);
    const answer = (decide: () => Decision) => {
      if (fault === "stall") return new Promise<Decision>(() => {});
      if (fault === "overloaded") {
        return thenable<Decision>(() => {
          throw new Error("Durable Object is overloaded. Too many requests queued.");
        });
      }
      return thenable(() => (this.answer ?? (() => structuredClone(decide())))() as Decision);
    };
    return {
      hit: (key, policy) => {
        this.calls.push(`${id} hit ${key}`);
        return answer(() => logs.hit(key, this.now, policy).decision);
      },
      peek: (key, policy) => {
        this.calls.push(`${id} peek ${key}`);
        return answer(() => logs.peek(key, this.now, policy));
      },
    };
  }
}

Deno.test("the client answers a real Promise over the stub's thenable, and 100 requests of one caller admit 60", async () => {
  const namespace = new FakeNamespace();
  const store = new DurableObjectStore(namespace, POLICY);
  let admitted = 0;
  for (let i = 0; i < 100; i++) {
    const result = store.hit("192.0.2.1", 0);
    assert.ok(result instanceof Promise);
    if ((await result).allowed) admitted++;
  }
  assert.equal(admitted, 60);
  assert.deepEqual(await store.peek("192.0.2.1", 0), {
    allowed: false,
    remaining: 0,
    resetSeconds: 60,
  });
  assert.deepEqual([...namespace.objects.keys()], ["192.0.2.1"]);
});

Deno.test("each caller has an object of its own; with shards, the callers of a shard share one", async () => {
  const perCaller = new FakeNamespace();
  const store = new DurableObjectStore(perCaller, POLICY);
  await store.hit("192.0.2.1", 0);
  await store.hit("2001:db8:0:1e::/64", 0);
  assert.deepEqual(perCaller.calls, [
    "192.0.2.1 hit 192.0.2.1",
    "2001:db8:0:1e::/64 hit 2001:db8:0:1e::/64",
  ]);
  const sharded = new FakeNamespace();
  const shards = new DurableObjectStore(sharded, POLICY, 16);
  for (let i = 0; i < 1600; i++) await shards.hit(`198.51.${i >> 8}.${i & 255}`, 0);
  assert.equal(sharded.objects.size, 16);
  const sizes = [...sharded.objects.values()].map((logs) => logs.callers);
  assert.equal(sizes.reduce((a, b) => a + b), 1600);
  // FNV-1a spreads addresses evenly enough: no shard holds twice its share.
  assert.ok(Math.max(...sizes) < 200, `shard sizes ${sizes}`);
  assert.equal(shards.objectName("192.0.2.1"), `shard:${shardOf("192.0.2.1", 16)}`);
});

Deno.test("an answer that is not a decision of the policy fails the call, and the failure policy answers", async () => {
  const namespace = new FakeNamespace();
  const client = new DurableObjectStore(namespace, POLICY);
  for (
    const bad of [
      undefined,
      "ok",
      { allowed: "yes", remaining: 1, resetSeconds: 1 },
      { allowed: true, remaining: 61, resetSeconds: 1 },
      { allowed: true, remaining: -1, resetSeconds: 1 },
      { allowed: true, remaining: 1.5, resetSeconds: 1 },
      { allowed: true, remaining: 1, resetSeconds: 61 },
      { allowed: true, remaining: 1, resetSeconds: NaN },
    ]
  ) {
    namespace.answer = () => bad;
    await assert.rejects(client.hit("192.0.2.1", 0), TypeError, JSON.stringify(bad));
  }
  // Extra fields of an answer are not passed on.
  namespace.answer = () => ({ allowed: true, remaining: 3, resetSeconds: 4, extra: "x" });
  assert.deepEqual(await client.hit("192.0.2.1", 0), {
    allowed: true,
    remaining: 3,
    resetSeconds: 4,
  });
  const store = createDurableObjectStore(namespace, {
    policy: POLICY,
    timeoutMs: 100,
    onError: "closed",
  });
  namespace.answer = () => ({ allowed: true, remaining: 99, resetSeconds: 1 });
  const refused = await store.hit("192.0.2.1", 0);
  assert.equal(refused.unavailable, true);
  assert.ok(store.answeredByPolicy(refused));
});

Deno.test("an object that fails or does not answer in time is answered by the failure policy: open admits, closed refuses", async () => {
  for (const onError of ["open", "closed"] as const) {
    const namespace = new FakeNamespace();
    const store = createDurableObjectStore(namespace, { policy: POLICY, timeoutMs: 50, onError });
    namespace.answer = () => {
      throw new Error("Durable Object is overloaded");
    };
    const failed = await store.hit("192.0.2.1", 0);
    assert.ok(store.answeredByPolicy(failed));
    assert.equal(failed.allowed, onError === "open");
    // A stub whose call never settles: the guard's timeout answers.
    const hanging: RateLimiterNamespace<string> = {
      idFromName: (name) => name,
      get: () => ({ hit: () => new Promise(() => {}), peek: () => new Promise(() => {}) }),
    };
    const slow = createDurableObjectStore(hanging, { policy: POLICY, timeoutMs: 50, onError });
    const started = performance.now();
    const timedOut = await slow.hit("192.0.2.1", 0);
    const waited = performance.now() - started;
    assert.ok(slow.answeredByPolicy(timedOut));
    assert.equal(timedOut.allowed, onError === "open");
    assert.ok(waited >= 45 && waited < 1_000, `waited ${waited} ms`);
  }
});

Deno.test("a caller key the store cannot hold is answered by the failure policy without a call", async () => {
  const namespace = new FakeNamespace();
  const store = createDurableObjectStore(namespace, {
    policy: POLICY,
    timeoutMs: 100,
    onError: "closed",
  });
  for (const key of ["", "k".repeat(MAX_KEY_LENGTH + 1)]) {
    const decision = await store.hit(key, 0);
    assert.ok(store.answeredByPolicy(decision));
  }
  // No caller's object is called. The failure has the guard ask its canaries, once a probe
  // interval at most, whether the namespace is down (it is not).
  assert.deepEqual(namespace.calls.filter((call) => !call.startsWith("canary:")), []);
  assert.equal(namespace.calls.length, CANARIES);
  assert.equal(store.breakerState, "closed");
  assert.equal((await store.hit("k".repeat(MAX_KEY_LENGTH), 0)).remaining, 59);
});

Deno.test("the store refuses at creation a policy or a shard count it cannot hold", () => {
  const namespace = new FakeNamespace();
  assert.throws(
    () => new DurableObjectStore(namespace, { limit: 10_001, windowMs: 60_000 }),
    RangeError,
  );
  assert.throws(() => new DurableObjectStore(namespace, { limit: 60, windowMs: 500 }), RangeError);
  for (const shards of [0, 1.5, MAX_SHARDS + 1, NaN]) {
    assert.throws(
      () => new DurableObjectStore(namespace, POLICY, shards),
      RangeError,
      String(shards),
    );
  }
});

/**
 * Sends 100 requests of `key` interleaved with `beside` requests of `failing` each, all at once per
 * round, and returns `key`'s decisions and `failing`'s.
 */
async function beside(
  store: ReturnType<typeof createDurableObjectStore>,
  key: string,
  failing: string,
  rounds = 100,
): Promise<{ own: Decision[]; failed: Decision[] }> {
  const own: Decision[] = [];
  const failed: Decision[] = [];
  for (let i = 0; i < rounds; i++) {
    const [mine, ...theirs] = await Promise.all([
      store.hit(key, 0),
      store.hit(failing, 0),
      store.hit(failing, 0),
      store.hit(failing, 0),
    ]);
    own.push(mine!);
    failed.push(...theirs);
  }
  return { own, failed };
}

/**
 * The header fields of `decisions`, after checking that each refusal carries its exact reset (the
 * object's, 60 s, then the memo's counted down from it).
 */
function fieldsOf(decisions: Decision[]): Decision[] {
  for (const d of decisions) {
    if (!d.allowed) assert.ok(d.resetMs! > 59_000 && d.resetMs! <= 60_000, `${d.resetMs} ms`);
  }
  return decisions.map(({ allowed, remaining, resetSeconds }) => ({
    allowed,
    remaining,
    resetSeconds,
  }));
}

/** The exact answers of a 60-request limit to 100 requests at one instant: 59 down to 0, then 40 refusals. */
const SIXTY_OF_100: Decision[] = Array.from(
  { length: 100 },
  (_, i) =>
    i < 60
      ? { allowed: true, remaining: 59 - i, resetSeconds: 60 }
      : { allowed: false, remaining: 0, resetSeconds: 60 },
);

Deno.test("an object that is overloaded or stalls fails its own caller only: every other caller is decided by its own object, 60 of 100 with exact fields", async () => {
  for (const fault of ["overloaded", "stall"] as const) {
    for (const onError of ["open", "closed"] as const) {
      const label = `${fault}, ${onError}`;
      const namespace = new FakeNamespace();
      namespace.faults.set("203.0.113.66", fault);
      const store = createDurableObjectStore(namespace, { policy: POLICY, timeoutMs: 30, onError });
      const { own, failed } = await beside(store, "192.0.2.1", "203.0.113.66");
      assert.deepEqual(fieldsOf(own), SIXTY_OF_100, label);
      assert.ok(own.every((d) => !store.answeredByPolicy(d)), label);
      // The failing caller is answered by the policy, and its object is left alone once it failed.
      assert.ok(failed.every((d) => store.answeredByPolicy(d)), label);
      assert.ok(failed.every((d) => d.allowed === (onError === "open")), label);
      const asked = namespace.calls.filter((call) => call.includes("203.0.113.66")).length;
      assert.ok(asked <= 12, `${label}: its object was asked ${asked} times for 300 requests`);
      assert.equal(store.failingObjects, 1, label);
      assert.equal(store.breakerState, "closed", `${label}: the namespace's breaker`);
      assert.equal(store.healthy, true, label);
      // A caller after it is decided by its own object too.
      const after = [];
      for (let i = 0; i < 100; i++) after.push(await store.hit("192.0.2.2", 0));
      assert.deepEqual(fieldsOf(after), SIXTY_OF_100, label);
    }
  }
});

Deno.test("with shards, a failing shard answers only its own callers by the policy", async () => {
  const namespace = new FakeNamespace();
  const store = createDurableObjectStore(namespace, {
    policy: POLICY,
    timeoutMs: 30,
    onError: "closed",
    shards: 16,
  });
  const failing = "203.0.113.66";
  let other = 0;
  while (shardOf(`192.0.2.${other}`, 16) === shardOf(failing, 16)) other++;
  namespace.faults.set(`shard:${shardOf(failing, 16)}`, "overloaded");
  const { own, failed } = await beside(store, `192.0.2.${other}`, failing);
  assert.deepEqual(fieldsOf(own), SIXTY_OF_100);
  assert.ok(failed.every((d) => d.unavailable === true));
});

Deno.test("failing objects are never the namespace's, however many; when the canaries fail too it is down: one incident, the breaker open, and every caller answered by the policy without a call", async () => {
  const namespace = new FakeNamespace();
  const incidents: StoreIncident[] = [];
  let clock = 0;
  const store = createDurableObjectStore(namespace, {
    policy: POLICY,
    timeoutMs: 30,
    onError: "open",
    onIncident: (incident) => incidents.push(incident),
    clock: () => clock,
  });
  // Fifty objects failing, each called often, and no other object called at all...
  for (let i = 0; i < 50; i++) namespace.faults.set(`198.51.100.${i}`, "overloaded");
  for (let n = 0; n < 10; n++) {
    for (let i = 0; i < 50; i++) await store.hit(`198.51.100.${i}`, 0);
  }
  // ...are fifty callers' failures: the canaries (objects named by the isolate) answer.
  assert.equal(store.breakerState, "closed");
  assert.equal(incidents.length, 0);
  assert.equal(store.failingObjects, 50);
  // Every object failing, the canaries too: the first failure tells it.
  namespace.answer = () => {
    throw new Error("Durable Object is overloaded");
  };
  clock += 1_000; // the canaries are asked once a probe interval at most
  assert.ok(store.answeredByPolicy(await store.hit("192.0.2.199", 0)));
  assert.equal(store.breakerState, "open");
  assert.equal(store.healthy, false);
  assert.deepEqual(incidents.map((incident) => incident.kind), ["unavailable"]);
  const calls = namespace.calls.length;
  assert.ok(store.answeredByPolicy(await store.hit("192.0.2.200", 0)));
  assert.equal(namespace.calls.length, calls, "answered without its object");
});

Deno.test("a refusal of the object is answered from memory for a few seconds, no call, with the object's own fields counted down; then the object is asked again", async () => {
  const namespace = new FakeNamespace();
  let steady = 0;
  const store = createDurableObjectStore(namespace, {
    policy: POLICY,
    timeoutMs: 100,
    onError: "closed",
    steadyClock: () => steady,
  });
  const start = namespace.now;
  for (let i = 0; i < 60; i++) await store.hit("192.0.2.1", 0);
  assert.equal((await store.hit("192.0.2.1", 0)).allowed, false);
  let calls = namespace.calls.length;
  const logs = namespace.objects.get("192.0.2.1")!;
  // Within a hold (2 s at least: MEMO_HOLD_MS less MEMO_SPREAD_MS) no call; past it, one.
  const probes: Array<[ms: number, asked: number]> = [
    [1, 0],
    [500, 0],
    [1000, 0],
    [1001, 0],
    [1999, 0],
    [45_000, 1],
    [45_001, 0],
    [59_999, 1],
  ];
  for (const [ms, asked] of probes) {
    steady = ms;
    namespace.now = start + ms;
    const { allowed, remaining, resetSeconds } = await store.hit("192.0.2.1", 0);
    assert.deepEqual(
      { allowed, remaining, resetSeconds },
      logs.peek("192.0.2.1", namespace.now, POLICY),
      `at ${ms} ms`,
    );
    assert.equal(namespace.calls.length, calls + asked, `at ${ms} ms`);
    calls = namespace.calls.length;
  }
  steady = 60_000;
  namespace.now = start + 60_000;
  assert.equal((await store.hit("192.0.2.1", 0)).allowed, true);
  assert.equal(namespace.calls.length, calls + 1);
});
