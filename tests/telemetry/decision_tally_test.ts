/**
 * The decisions counter is fed in batches (`DecisionTally` in lib/telemetry/otel.ts): nothing is
 * added per request, the totals are added once the flush delay is over, and every decision still
 * waiting is added when the process unloads (`Deno.exit` and the runtime's own exits dispatch
 * `unload` before the exporters' last export). And each decision's outcome is what happened: the
 * failure policy's answers as its own, whatever the caller's exemption or the mode. Measured through the OpenTelemetry API's global meter
 * provider, replaced here by one that records every `add`, around the real memory store.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type Attributes, createNoopMeter, type Meter, metrics } from "@opentelemetry/api";
import { createTelemetry } from "../../lib/telemetry/otel.ts";
import { MemoryStore } from "../../lib/limit/memory/memory_store.ts";
import { GuardedStore } from "../../lib/limit/guard/guarded_store.ts";
import type { RateLimitStore } from "../../lib/limit/core/decision.ts";

/** Every `add` of the decisions counter, in order. */
const adds: { value: number; outcome: string }[] = [];
/** Resolves the next wait for an `add`. */
let onAdd: (() => void) | undefined;

const noop = createNoopMeter();
const meter: Meter = Object.assign(Object.create(noop), {
  createCounter(name: string) {
    if (name !== "ratelimit.decisions") return noop.createCounter(name);
    return {
      add(value: number, attributes?: Attributes) {
        adds.push({ value, outcome: String(attributes?.["ratelimit.outcome"]) });
        onAdd?.();
      },
    };
  },
});
assert.ok(metrics.setGlobalMeterProvider({ getMeter: () => meter }), "the provider is ours");

/** The totals added so far, per outcome. */
function added(): Record<string, number> {
  const totals: Record<string, number> = {};
  for (const { value, outcome } of adds) totals[outcome] = (totals[outcome] ?? 0) + value;
  return totals;
}

/** The decisions store at limit 60, counted by a telemetry whose tally waits `flushMs`. */
function countedStore(flushMs: number) {
  const telemetry = createTelemetry({
    storeKind: "memory",
    storeTimeoutMs: 100,
    syncTimeoutMs: 5000,
    paths: ["/"],
    tracing: false,
    decisionFlushMs: flushMs,
  });
  return telemetry.wrapDecisions(new MemoryStore({ limit: 60, windowMs: 60_000 }));
}

Deno.test("the decisions counter: nothing added per request, the totals once the delay is over, in one add per outcome", async () => {
  adds.length = 0;
  const store = countedStore(50);
  try {
    const added70 = new Promise<void>((resolve) => onAdd = resolve);
    const now = Date.now();
    for (let i = 0; i < 70; i++) await store.hit("caller", now);
    assert.equal(adds.length, 0, "nothing is added while the decisions wait");
    await added70;
    assert.deepEqual(added(), { admitted: 60, limited: 10 });
    assert.equal(adds.length, 2, "one add per outcome");
  } finally {
    onAdd = undefined;
    await store.close();
  }
});

Deno.test("the decisions counter: decisions still waiting are added when the process unloads", async () => {
  adds.length = 0;
  // A delay no test waits for: only the unload can add them.
  const store = countedStore(3_600_000);
  try {
    const now = Date.now();
    for (let i = 0; i < 61; i++) await store.hit("caller", now);
    assert.equal(adds.length, 0);
    globalThis.dispatchEvent(new Event("unload"));
    assert.deepEqual(added(), { admitted: 60, limited: 1 });
    // Added once: a later flush adds nothing again (the timer was cleared with the flush).
    globalThis.dispatchEvent(new Event("unload"));
    assert.deepEqual(added(), { admitted: 60, limited: 1 });
  } finally {
    await store.close();
  }
});

/**
 * A guard over a store of objects, one per caller key (the memory store's logs), whose objects
 * named in `failing` throw; its canaries answer (the namespace is up).
 */
function objectsGuard(onError: "open" | "closed", failing: ReadonlySet<string>): GuardedStore {
  const logs = new MemoryStore({ limit: 60, windowMs: 60_000 }, { sweep: false });
  const objects: RateLimitStore = {
    hit: (key, now) =>
      failing.has(key)
        ? Promise.reject(new Error("Durable Object is overloaded"))
        : Promise.resolve(logs.hit(key, now)),
    peek: (key, now) => logs.peek(key, now),
    close: () => logs.close(),
  };
  return new GuardedStore(objects, {
    policy: { limit: 60, windowMs: 60_000 },
    timeoutMs: 100,
    onError,
    failureScope: (key) => key,
    canaries: [() => Promise.resolve()],
    localCount: () => new MemoryStore({ limit: 60, windowMs: 60_000 }, { sweep: false }),
  });
}

Deno.test("the decisions counter counts outcomes as they are: the failure policy's answers as its own whatever the exemption or the mode, the isolate's count of a failing object's caller apart, and denied requests", async () => {
  adds.length = 0;
  const telemetry = () =>
    createTelemetry({
      storeKind: "memory",
      storeTimeoutMs: 100,
      syncTimeoutMs: 5000,
      paths: ["/"],
      tracing: false,
      decisionFlushMs: 3_600_000,
    });
  const exempt = (key: string) => key.startsWith("203.0.113.");
  const now = Date.now();
  // Open, enforced: a caller whose object fails, counted by the isolate; an exempt caller.
  const open = telemetry().wrapDecisions(objectsGuard("open", new Set(["192.0.2.66"])), {
    report: false,
    exempt,
  });
  for (let i = 0; i < 61; i++) await open.hit("192.0.2.66", now);
  for (let i = 0; i < 61; i++) await open.hit("203.0.113.5", now);
  for (let i = 0; i < 3; i++) open.denied?.("198.51.100.7");
  // Closed, report mode: the policy's refusals of an exempt caller and of anyone, served by the
  // handler, are still the policy's; the store's own refusal in report mode is report_refused.
  const failing = new Set(["203.0.113.66", "192.0.2.77"]);
  const closed = telemetry().wrapDecisions(objectsGuard("closed", failing), {
    report: true,
    exempt,
  });
  for (let i = 0; i < 2; i++) await closed.hit("203.0.113.66", now);
  for (let i = 0; i < 2; i++) await closed.hit("192.0.2.77", now);
  for (let i = 0; i < 61; i++) await closed.hit("192.0.2.1", now);
  globalThis.dispatchEvent(new Event("unload"));
  assert.deepEqual(added(), {
    failure_policy_local_admitted: 60,
    failure_policy_local_limited: 1,
    admitted: 120,
    exempted: 1,
    denied: 3,
    failure_policy_closed: 4,
    report_refused: 1,
  });
  await open.close();
  await closed.close();
});
