/**
 * A rate-limit store over Cloudflare Durable Objects, for the service on Workers: many isolates in
 * many places, one limit per caller.
 *
 * Each caller is owned by one object, named by its key (`idFromName(key)`), which keeps the caller's
 * exact sliding log in memory and in its storage (`lib/workers/rate_limiter_object.ts`,
 * `object_logs.ts`); the platform runs at most one instance of an object at a time, so every
 * isolate's requests of a caller are decided in one place, in order. One object per caller rather
 * than a fixed number of shards, as Cloudflare's own rate-limiter example does: the object is
 * created near the caller's first request and stays there (a caller's requests come from one
 * region), no object serves more than one caller's traffic (a single object handles about 1,000
 * requests/s), and an object holds one log (lib/limit/README.md, "Durable Objects on Workers", has
 * the figures). `shards` keeps a fixed number of objects instead, each owning the callers whose key
 * hashes to it.
 *
 * This module is the Worker's side and uses no runtime API: the namespace is a structural type, and
 * the failure policy, the timeout, the circuit breakers (one per object), the watch over the
 * namespace and the refusals answered from memory are {@linkcode GuardedStore}'s; this client gives
 * it the objects the watch asks, {@linkcode CANARIES} objects per isolate that no caller key names
 * (`canary()`). A Durable
 * Object's RPC result is a thenable that is not `instanceof Promise`; this client answers a real
 * Promise, which the guard and the handler rely on.
 *
 * @module
 */

import type { Decision, RateLimitPolicy, RateLimitStore } from "../core/decision.ts";
import {
  GuardedStore,
  type StoreFailurePolicy,
  type StoreIncident,
} from "../guard/guarded_store.ts";
import type { CallerNotice } from "../guard/caller_notices.ts";
import { checkDurablePolicy, checkKey } from "./object_logs.ts";

/** The RPC methods of the rate-limiter object, as a stub exposes them. */
export interface RateLimiterStub {
  /** Decides on a request of `key` by the object's clock, and counts it when admitted. */
  hit(key: string, policy: RateLimitPolicy): PromiseLike<Decision>;
  /** Reports `key`'s state without counting anything. */
  peek(key: string, policy: RateLimitPolicy): PromiseLike<Decision>;
}

/** The parts of a `DurableObjectNamespace` binding this store uses. */
export interface RateLimiterNamespace<Id = unknown> {
  /** The id of the object named `name` (the same name gives the same object everywhere). */
  idFromName(name: string): Id;
  /** A stub of the object `id` (cheap: no round trip until a method is called). */
  get(id: Id): RateLimiterStub;
}

/** Options of {@linkcode createDurableObjectStore}. */
export interface DurableObjectStoreOptions {
  /** The limit and window every caller gets (a limit of at most 10,000). */
  policy: RateLimitPolicy;
  /** The longest a decision may take, in ms (`RATE_LIMIT_STORE_TIMEOUT_MS`). */
  timeoutMs: number;
  /** What to answer when the object fails or times out (`RATE_LIMIT_ON_STORE_ERROR`). */
  onError: StoreFailurePolicy;
  /** Receives the start and the end of every incident. */
  onIncident?: (incident: StoreIncident) => void;
  /** How long to leave a failing object (or namespace) alone before probing it, in ms (default 1000). */
  probeIntervalMs?: number;
  /** The steady clock refusals are remembered by (default `performance.now`; tests set it). */
  steadyClock?: () => number;
  /** The clock of probe intervals and windows of lines, in ms (default `Date.now`; tests set it). */
  clock?: () => number;
  /**
   * A fixed number of objects, each owning the callers whose key hashes to it; omitted (the
   * default), each caller has an object of its own.
   */
  shards?: number;
  /**
   * Under `open`: makes (when first needed) the isolate's own count of the callers whose object
   * fails, so that each gets at most the limit per window here (the Worker gives its memory
   * store); omitted, such a caller is admitted uncounted.
   */
  localCount?: () => RateLimitStore;
  /** Told of the callers whose own object fails, a line per caller per window at most. */
  callerNotices?: { label: (key: string) => string; write: (notice: CallerNotice) => void };
}

/**
 * The objects per isolate that the namespace's watch asks when a caller's object fails: two, so
 * that one canary's own passing fault (its object restarting) never passes for an outage, which
 * takes both failing with the caller's object.
 */
export const CANARIES = 2;

/**
 * What a canary is asked: a hit, as a caller's request is (the object, and its storage's write),
 * under a limit of one a second, so that its log never holds more than one time (the watch asks at
 * most once a second).
 */
const CANARY_POLICY: RateLimitPolicy = { limit: 1, windowMs: 1000 };

/** The key a canary's hit counts under (its object holds nothing else). */
const CANARY_KEY = "canary";

/** The most shards {@linkcode DurableObjectStoreOptions.shards} takes. */
export const MAX_SHARDS = 4096;

/**
 * The store the Worker decides with: {@linkcode DurableObjectStore} under the failure policy.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import type { Decision } from "../core/decision.ts";
 * // What a binding's stub answers: a thenable, not a Promise.
 * const thenable = (d: Decision): PromiseLike<Decision> => ({
 *   then: (ok, fail) => Promise.resolve(d).then(ok, fail),
 * });
 * const namespace = {
 *   idFromName: (name: string) => name,
 *   get: () => ({
 *     hit: () => thenable({ allowed: true, remaining: 59, resetSeconds: 60 }),
 *     peek: () => thenable({ allowed: true, remaining: 60, resetSeconds: 60 }),
 *   }),
 * };
 * const store = createDurableObjectStore(namespace, {
 *   policy: { limit: 60, windowMs: 60_000 },
 *   timeoutMs: 100,
 *   onError: "closed",
 * });
 * const decision = store.hit("192.0.2.1", Date.now());
 * assert.ok(decision instanceof Promise);
 * assert.deepEqual(await decision, { allowed: true, remaining: 59, resetSeconds: 60 });
 * ```
 */
export function createDurableObjectStore<Id>(
  namespace: RateLimiterNamespace<Id>,
  options: DurableObjectStoreOptions,
): GuardedStore {
  const store = new DurableObjectStore(namespace, options.policy, options.shards);
  return new GuardedStore(store, {
    // An object fails alone (overloaded, restarting): its own callers are answered by the policy.
    failureScope: (key) => store.objectName(key),
    // The namespace is down only when objects no caller owns fail too.
    canaries: Array.from({ length: CANARIES }, (_, i) => () => store.canary(i)),
    ...(options.localCount ? { localCount: options.localCount } : {}),
    ...(options.callerNotices ? { callerNotices: options.callerNotices } : {}),
    policy: options.policy,
    timeoutMs: options.timeoutMs,
    onError: options.onError,
    ...(options.onIncident ? { onIncident: options.onIncident } : {}),
    ...(options.probeIntervalMs !== undefined ? { probeIntervalMs: options.probeIntervalMs } : {}),
    ...(options.steadyClock ? { steadyClock: options.steadyClock } : {}),
    ...(options.clock ? { clock: options.clock } : {}),
  });
}

/**
 * The store's client, without the failure policy: one RPC per decision to the object that owns the
 * caller. Its answer is checked before use (a decision of the policy's shape, or the call fails).
 */
export class DurableObjectStore<Id = unknown> implements RateLimitStore {
  readonly #namespace: RateLimiterNamespace<Id>;
  readonly #policy: RateLimitPolicy;
  readonly #shards: number | undefined;
  #canaryTag: string | undefined;

  /** Creates the client; throws a `RangeError` on a policy or a shard count it cannot hold. */
  constructor(namespace: RateLimiterNamespace<Id>, policy: RateLimitPolicy, shards?: number) {
    checkDurablePolicy(policy);
    if (
      shards !== undefined && !(Number.isInteger(shards) && shards >= 1 && shards <= MAX_SHARDS)
    ) {
      throw new RangeError(`shards must be a whole number from 1 to ${MAX_SHARDS}`);
    }
    this.#namespace = namespace;
    this.#policy = { limit: policy.limit, windowMs: policy.windowMs };
    this.#shards = shards;
  }

  /**
   * {@inheritDoc RateLimitStore.hit} The object decides by its own clock: `now` is not sent, so
   * that every decision on a caller is taken by one clock.
   */
  hit(key: string, _now: number): Promise<Decision> {
    return this.#call(key, (stub) => stub.hit(key, this.#policy));
  }

  /** {@inheritDoc RateLimitStore.peek} */
  peek(key: string, _now: number): Promise<Decision> {
    return this.#call(key, (stub) => stub.peek(key, this.#policy));
  }

  /** {@inheritDoc RateLimitStore.close} Nothing to release: a stub holds no connection. */
  close(): void {}

  /** The name of the object that owns `key`. */
  objectName(key: string): string {
    return this.#shards === undefined ? key : `shard:${shardOf(key, this.#shards)}`;
  }

  /**
   * Asks canary `index` (of {@linkcode CANARIES}): an object named for this client (this isolate),
   * `canary:<random>:<index>`, which no caller key (an address, a `/64`, `shard:<n>`) can name, so
   * no request reaches it. Resolves when it decided, rejects when it failed.
   */
  async canary(index: number): Promise<Decision> {
    // Made at the first check, inside a request: a Worker may not draw random values at start-up.
    this.#canaryTag ??= crypto.randomUUID();
    const namespace = this.#namespace;
    const stub = namespace.get(namespace.idFromName(`canary:${this.#canaryTag}:${index}`));
    return checkedDecision(await stub.hit(CANARY_KEY, CANARY_POLICY), CANARY_POLICY);
  }

  async #call(key: string, call: (stub: RateLimiterStub) => PromiseLike<Decision>) {
    checkKey(key);
    const namespace = this.#namespace;
    // A stub per call: a stub is bound to the request that made it, and making one costs no I/O.
    const stub = namespace.get(namespace.idFromName(this.objectName(key)));
    // `await` adopts the RPC's thenable, so the caller gets a real Promise.
    return checkedDecision(await call(stub), this.#policy);
  }
}

/**
 * FNV-1a of `key`'s UTF-16 code units, modulo `shards`: the shard a caller belongs to.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(shardOf("192.0.2.1", 16), shardOf("192.0.2.1", 16));
 * assert.ok(shardOf("192.0.2.1", 16) < 16);
 * ```
 */
export function shardOf(key: string, shards: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    hash = Math.imul(hash ^ key.charCodeAt(i), 0x01000193) >>> 0;
  }
  return hash % shards;
}

/** `value` if it is a decision `policy` can give, else a `TypeError` (the call failed). */
function checkedDecision(value: unknown, policy: RateLimitPolicy): Decision {
  const d = value as Partial<Decision> | null;
  const windowSeconds = policy.windowMs / 1000;
  if (
    typeof d !== "object" || d === null || typeof d.allowed !== "boolean" ||
    !Number.isInteger(d.remaining) || d.remaining! < 0 || d.remaining! > policy.limit ||
    !Number.isInteger(d.resetSeconds) || d.resetSeconds! < 0 || d.resetSeconds! > windowSeconds
  ) {
    throw new TypeError("the rate-limiter object answered something that is not a decision");
  }
  const decision = { allowed: d.allowed, remaining: d.remaining!, resetSeconds: d.resetSeconds! };
  // A refusal's exact reset, when it agrees with the rest (an older object sends none): the memo's.
  const resetMs = d.resetMs;
  return !d.allowed && typeof resetMs === "number" && resetMs > 0 && resetMs <= policy.windowMs &&
      Math.ceil(resetMs / 1000) === d.resetSeconds
    ? { ...decision, resetMs }
    : decision;
}
