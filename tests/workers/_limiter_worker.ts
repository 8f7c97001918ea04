/**
 * The test Worker of the Durable Object store (`tests/workers/rate_limiter_object_test.ts`): built at
 * test time and served by real workerd through miniflare. Each request makes one decision through
 * `createDurableObjectStore` and answers it as JSON, with the time the decision took in the Worker.
 * The store is opened with the Worker's own options (`lib/workers/store.ts`: the isolate's count of
 * callers whose object fails, the store's events as JSON lines) over the namespace a request names.
 *
 * `GET /hit?key=K` decides on caller K through the `RATE_LIMITER` binding; `ns=SLOW`, `ns=STALL` or
 * `ns=BROKEN` go through objects that answer late (500 ms), stall (10 s) or fail (every object: a
 * namespace outage), `ns=MIXED&fail=F&fault=SLOW|STALL|BROKEN` through the real objects except
 * those of the callers whose key starts with F, which are late or fail (overloaded objects beside
 * healthy ones, and the canaries healthy); `on_error=open|closed` and `timeout_ms` set the failure
 * policy, `store=T` gives a store of its own (a guard with its own breakers) for the same options.
 * Each answer carries the store's breaker state and the object calls it made so far (callers'
 * objects, canaries). `GET /burst?prefix=P&n=N` (same options) decides on callers P0 to P(N-1) at
 * once, in one request. `GET /usage?name=N` reports the accounting of the object named N; `GET /many`
 * times decisions inside the Worker (the figures of lib/limit/README.md). `GET /calls?key=K` says
 * how many `hit` calls this isolate sent to caller K's object; `memo=before` decides through the
 * guard as it was before its memo had a bound (a refusal held to its end, no request waiting for
 * another's call), `memo=unmerged` with the bound but no waiting: the benchmark's references;
 * `status=1` answers with a status only (200, 429, or 503 for the failure policy's answer).
 *
 * @module
 */

import {
  createDurableObjectStore,
  DurableObjectStore,
  type RateLimiterNamespace,
  type RateLimiterStub,
} from "../../lib/limit/durable_object/durable_object_store.ts";
import { GuardedStore, type StoreFailurePolicy } from "../../lib/limit/guard/guarded_store.ts";
import { RateLimiterObject as ShippedObject } from "../../lib/workers/rate_limiter_object.ts";
import type { Decision, RateLimitPolicy } from "../../lib/limit/core/decision.ts";
import { durableStoreOptions } from "../../lib/workers/store.ts";
import { workersMaxCallers } from "../../lib/workers/memory_cap.ts";

/**
 * The shipped object, keeping an idle caller `IDLE_MS` (a binding) instead of a day when it is
 * set, so that a test sees the idle sweep run.
 */
export class RateLimiterObject extends ShippedObject {
  protected override get idleAfterMs(): number {
    // `env` is the base class's (cloudflare:workers), which the shim here does not declare.
    const idle = (this as unknown as { env: { IDLE_MS?: string } }).env.IDLE_MS;
    return idle === undefined ? super.idleAfterMs : Number(idle);
  }
}

/** The object's class with a `hit` that may answer later, as an RPC method may. */
const Delayable: new (ctx: never, env: unknown) => Omit<RateLimiterObject, "hit"> & {
  hit(key: string, policy: RateLimitPolicy): Decision | Promise<Decision>;
} = RateLimiterObject;

/** An object that answers each decision `SLOW_MS` late (a slow or distant object). */
export class SlowObject extends Delayable {
  override async hit(key: string, policy: RateLimitPolicy): Promise<Decision> {
    await new Promise((resolve) => setTimeout(resolve, SLOW_MS));
    return super.hit(key, policy);
  }
}

/** An object that stalls: it answers each decision `STALL_MS` late, beyond any bound of the guard. */
export class StallObject extends Delayable {
  override async hit(key: string, policy: RateLimitPolicy): Promise<Decision> {
    await new Promise((resolve) => setTimeout(resolve, STALL_MS));
    return super.hit(key, policy);
  }
}

/** An object whose every decision fails (an object that is down or overloaded). */
export class BrokenObject extends RateLimiterObject {
  override hit(_key: string, _policy: RateLimitPolicy): Decision {
    throw new Error("Durable Object is overloaded. Too many requests queued.");
  }
}

/** How late {@linkcode SlowObject} answers, in ms. */
const SLOW_MS = 500;

/**
 * How late {@linkcode StallObject} answers, in ms: past the longest a call may be waited for (the
 * timeout extended three times for a busy loop, `MAX_EXTENSIONS`), so it never answers in time.
 */
const STALL_MS = 10_000;

interface Env {
  RATE_LIMITER: {
    idFromName(name: string): unknown;
    get(id: unknown): RateLimiterStub & { usage(): Promise<unknown> };
  };
  SLOW: RateLimiterNamespace;
  STALL: RateLimiterNamespace;
  BROKEN: RateLimiterNamespace;
  LIMIT: string;
  WINDOW_SECONDS: string;
  SHARDS?: string;
}

/** One store per binding and policy, kept for the isolate's life as the service keeps its own. */
const stores = new Map<string, GuardedStore>();

/** The object calls each store made: to callers' objects, and to its canaries. */
const storeCalls = new Map<GuardedStore, { objects: number; canaries: number }>();

/** `namespace`, counting each call into `count` by the name of the object called. */
function tallied(
  namespace: RateLimiterNamespace,
  count: { objects: number; canaries: number },
): RateLimiterNamespace {
  const tally = (name: string) => name.startsWith("canary:") ? count.canaries++ : count.objects++;
  return {
    idFromName: (name) => ({ name, id: namespace.idFromName(name) }),
    get: (id) => {
      const { name, id: inner } = id as { name: string; id: unknown };
      const stub = namespace.get(inner);
      return {
        hit: (key, policy) => (tally(name), stub.hit(key, policy)),
        peek: (key, policy) => (tally(name), stub.peek(key, policy)),
      };
    },
  };
}

/** The `hit` calls this isolate sent to the real objects, per caller key. */
const objectCalls = new Map<string, number>();

/** `namespace`, its stubs' `hit` calls counted in {@linkcode objectCalls}. */
function counted(namespace: RateLimiterNamespace): RateLimiterNamespace {
  return {
    idFromName: (name) => namespace.idFromName(name),
    get: (id) => {
      const stub = namespace.get(id);
      return {
        hit: (key, policy) => {
          objectCalls.set(key, (objectCalls.get(key) ?? 0) + 1);
          return stub.hit(key, policy);
        },
        peek: (key, policy) => stub.peek(key, policy),
      };
    },
  };
}

/**
 * The guard of a benchmark's reference over `namespace`: `before`, a refusal held to its end and
 * no request waiting for another's call; `unmerged`, the shipped bound without the waiting.
 */
function reference(
  namespace: RateLimiterNamespace,
  memo: "before" | "unmerged",
  options: { policy: RateLimitPolicy; timeoutMs: number; onError: StoreFailurePolicy },
): GuardedStore {
  const store = new DurableObjectStore(namespace, options.policy);
  return new GuardedStore(store, {
    ...options,
    failureScope: (key) => store.objectName(key),
    mergeInFlight: false,
    ...(memo === "before" ? { memo: { holdMs: options.policy.windowMs, spreadMs: 0 } } : {}),
  });
}

/**
 * The real objects, except those whose name starts with `failing`, which are `faulty`'s (late or
 * failing): overloaded objects in a namespace of healthy ones (the canaries among these).
 */
function mixed(env: Env, failing: string, faulty: RateLimiterNamespace): RateLimiterNamespace {
  const real = env.RATE_LIMITER as RateLimiterNamespace;
  const of = (name: string) => failing !== "" && name.startsWith(failing) ? faulty : real;
  return {
    idFromName: (name) => ({ name, id: of(name).idFromName(name) }),
    get: (id) => {
      const { name, id: inner } = id as { name: string; id: unknown };
      return of(name).get(inner);
    },
  };
}

function storeOf(env: Env, url: URL): GuardedStore {
  const ns = url.searchParams.get("ns") ?? "RATE_LIMITER";
  const onError = (url.searchParams.get("on_error") ?? "closed") as StoreFailurePolicy;
  const timeoutMs = Number(url.searchParams.get("timeout_ms") ?? "1000");
  const failing = url.searchParams.get("fail") ?? "";
  const faults = ["SLOW", "STALL", "BROKEN"] as const;
  const named = url.searchParams.get("fault");
  const fault = faults.find((f) => f === named) ?? "BROKEN";
  const memo = url.searchParams.get("memo");
  // `store=T` opens a store of its own (a fresh guard) for the same options.
  const id = `${ns} ${onError} ${timeoutMs} ${failing} ${fault} ${memo} ${
    url.searchParams.get("store")
  }`;
  let store = stores.get(id);
  if (store === undefined) {
    const limit = Number(env.LIMIT);
    const policy = { limit, windowMs: Number(env.WINDOW_SECONDS) * 1000 };
    const count = { objects: 0, canaries: 0 };
    const namespace = tallied(
      ns === "MIXED"
        ? mixed(env, failing, env[fault])
        : ns === "RATE_LIMITER"
        ? counted(env.RATE_LIMITER as RateLimiterNamespace)
        : env[ns as (typeof faults)[number]],
      count,
    );
    const shards = env.SHARDS === undefined ? {} : { shards: Number(env.SHARDS) };
    const options = durableStoreOptions({
      rateLimit: limit,
      rateLimitWindowSeconds: Number(env.WINDOW_SECONDS),
      rateLimitStoreTimeoutMs: timeoutMs,
      rateLimitOnStoreError: onError,
      rateLimitMaxCallers: workersMaxCallers(limit),
    });
    store = memo === "before" || memo === "unmerged"
      ? reference(namespace, memo, { policy, timeoutMs, onError })
      : createDurableObjectStore(namespace, { ...options, ...shards });
    stores.set(id, store);
    storeCalls.set(store, count);
  }
  return store;
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    const key = url.searchParams.get("key") ?? "192.0.2.1";
    if (url.pathname === "/usage") {
      const name = url.searchParams.get("name") ?? key;
      return Response.json(await env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(name)).usage());
    }
    if (url.pathname === "/calls") return Response.json({ calls: objectCalls.get(key) ?? 0 });
    const store = storeOf(env, url);
    if (url.pathname === "/many") return Response.json({ ms: await timed(store, url, key) });
    if (url.pathname === "/burst") return Response.json(await burst(store, url));
    const started = performance.now();
    const result = store.hit(key, Date.now());
    const promise = result instanceof Promise;
    const decision = await result;
    const ms = performance.now() - started;
    const byPolicy = store.answeredByPolicy(decision);
    if (url.searchParams.has("status")) {
      // For a load tester that counts statuses: 200 admitted, 429 refused, 503 the policy's answer.
      return new Response(null, { status: byPolicy ? 503 : decision.allowed ? 200 : 429 });
    }
    const breaker = store.breakerState;
    return Response.json({
      decision,
      byPolicy,
      promise,
      ms,
      breaker,
      calls: storeCalls.get(store),
    });
  },
};

/** Decisions on the callers `prefix`0 to `prefix`(n-1), all at once. */
async function burst(store: GuardedStore, url: URL) {
  const prefix = url.searchParams.get("prefix") ?? "203.0.113.";
  const n = Number(url.searchParams.get("n") ?? "1");
  const now = Date.now();
  const decisions = await Promise.all(
    Array.from({ length: n }, (_, i) => store.hit(`${prefix}${i}`, now)),
  );
  return {
    reports: decisions.map((decision) => ({
      decision,
      byPolicy: store.answeredByPolicy(decision),
    })),
    breaker: store.breakerState,
  };
}

/**
 * The time per decision of `batches` batches of `n` decisions one after the other (workerd's clock
 * moves in whole milliseconds, so a decision is timed as the mean of its batch). With `fresh=1`
 * each decision is a caller never seen before (its object is created), else the `callers` callers
 * `key.0`, `key.1`... take turns.
 */
async function timed(store: GuardedStore, url: URL, key: string): Promise<number[]> {
  const n = Number(url.searchParams.get("n") ?? "10");
  const batches = Number(url.searchParams.get("batches") ?? "1");
  const callers = Number(url.searchParams.get("callers") ?? "1");
  const fresh = url.searchParams.get("fresh") === "1";
  const ms: number[] = [];
  let i = 0;
  for (let b = 0; b < batches; b++) {
    const started = performance.now();
    for (let j = 0; j < n; j++, i++) await store.hit(`${key}.${fresh ? i : i % callers}`, 0);
    ms.push((performance.now() - started) / n);
  }
  return ms;
}
