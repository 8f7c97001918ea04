/**
 * The decisions counter is fed in batches (`DecisionTally` in lib/telemetry/otel.ts): nothing is
 * added per request, the totals are added once the flush delay is over, and every decision still
 * waiting is added when the process unloads (`Deno.exit` and the runtime's own exits dispatch
 * `unload` before the exporters' last export). Measured through the OpenTelemetry API's global meter
 * provider, replaced here by one that records every `add`, around the real memory store.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type Attributes, createNoopMeter, type Meter, metrics } from "@opentelemetry/api";
import { createTelemetry } from "../../lib/telemetry/otel.ts";
import { MemoryStore } from "../../lib/limit/memory/memory_store.ts";

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
