/**
 * What the failure-policy tests share (failing_objects_test.ts, namespace_outage_test.ts): a store of
 * many objects, one per caller key deciding exactly (the memory store's log of that key), any of
 * which throws as an overloaded Durable Object does or never answers, canaries that fail only when
 * the whole namespace does, and `GuardedStore` over it as the Durable Object store opens it.
 *
 * @module
 */

import { truncatedCaller } from "../../../lib/access_log.ts";
import type {
  Decision,
  RateLimitPolicy,
  RateLimitStore,
} from "../../../lib/limit/core/decision.ts";
import type { CallerNotice } from "../../../lib/limit/guard/caller_notices.ts";
import {
  GuardedStore,
  type StoreFailurePolicy,
  type StoreIncident,
} from "../../../lib/limit/guard/guarded_store.ts";
import { MemoryStore } from "../../../lib/limit/memory/memory_store.ts";

export const POLICY: RateLimitPolicy = { limit: 60, windowMs: 60_000 };

/** The time every object decides at: one instant, so that each answer's fields are known exactly. */
export const NOW = 1_800_000_000_000;

/** The store timeout of these tests, in ms. */
export const TIMEOUT_MS = 40;

/** How an object fails: it throws as an overloaded Durable Object does, or never answers. */
export type Fault = "overloaded" | "stall";

/** What an overloaded Durable Object throws. */
export const OVERLOADED = "Durable Object is overloaded. Too many requests queued.";

/**
 * One object per caller key, each deciding exactly; an object named in `faults` fails, and with
 * `down` every object does, the canaries too (a namespace outage). Counts each object's calls.
 */
export class Objects implements RateLimitStore {
  readonly logs = new MemoryStore(POLICY, { sweep: false });
  readonly faults = new Map<string, Fault>();
  down: Fault | undefined;
  readonly calls = new Map<string, number>();

  hit(key: string, now: number): Promise<Decision> {
    return this.#answer(key, () => this.logs.hit(key, now));
  }
  peek(key: string, now: number): Promise<Decision> {
    return this.#answer(key, () => this.logs.peek(key, now));
  }
  /** Canary `i`: an object no caller key names. */
  canary(i: number): Promise<Decision> {
    return this.#answer(`canary:${i}`, () => ({ allowed: true, remaining: 0, resetSeconds: 1 }));
  }
  close(): void {}

  /** Calls of every object whose name starts with `prefix`. */
  callsOf(prefix: string): number {
    let calls = 0;
    for (const [name, n] of this.calls) if (name.startsWith(prefix)) calls += n;
    return calls;
  }

  #answer(name: string, decide: () => Decision): Promise<Decision> {
    this.calls.set(name, (this.calls.get(name) ?? 0) + 1);
    const fault = this.down ?? this.faults.get(name);
    if (fault === "stall") return new Promise(() => {});
    if (fault === "overloaded") return Promise.reject(new Error(OVERLOADED));
    return Promise.resolve(decide());
  }
}

/** What {@linkcode objectsGuard} gives a test. */
export interface ObjectsGuard {
  objects: Objects;
  guard: GuardedStore;
  incidents: StoreIncident[];
  /** When each incident was reported (`performance.now()`). */
  reported: number[];
  notices: CallerNotice[];
  /** Moves the guard's clock on by `ms`; answers the new time. */
  advance: (ms: number) => number;
}

/** The guard as the Durable Object store opens it, over `Objects`, with a clock the test moves. */
export function objectsGuard(onError: StoreFailurePolicy): ObjectsGuard {
  const objects = new Objects();
  const incidents: StoreIncident[] = [];
  /** When each incident was reported (`performance.now()`). */
  const reported: number[] = [];
  const notices: CallerNotice[] = [];
  let clock = NOW;
  const guard = new GuardedStore(objects, {
    policy: POLICY,
    timeoutMs: TIMEOUT_MS,
    onError,
    onIncident: (incident) => {
      incidents.push(incident);
      reported.push(performance.now());
    },
    clock: () => clock,
    // The refusals answered from memory keep the store's fields exactly: no time passes for them.
    steadyClock: () => 0,
    failureScope: (key) => key,
    canaries: [() => objects.canary(0), () => objects.canary(1)],
    localCount: () => new MemoryStore(POLICY, { sweep: false }),
    callerNotices: { label: truncatedCaller, write: (notice) => notices.push(notice) },
  });
  return {
    objects,
    guard,
    incidents,
    reported,
    notices,
    advance: (ms: number) => (clock += ms),
  };
}

/** A decision's four fields (a refusal's exact reset aside): what the response carries. */
export function fields(
  decision: Decision,
): Pick<Decision, "allowed" | "remaining" | "resetSeconds" | "unavailable"> {
  const { allowed, remaining, resetSeconds, unavailable } = decision;
  return unavailable ? { allowed, remaining, resetSeconds, unavailable } : {
    allowed,
    remaining,
    resetSeconds,
  };
}
