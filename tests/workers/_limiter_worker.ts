/**
 * The test Worker of the Durable Object store (`tests/workers/rate_limiter_object_test.ts`): built at
 * test time and served by real workerd through miniflare. Each request makes one decision through
 * `createDurableObjectStore` and answers it as JSON, with the time the decision took in the Worker.
 *
 * `GET /hit?key=K` decides on caller K through the `RATE_LIMITER` binding; `ns=SLOW` or `ns=BROKEN`
 * go through an object that answers late or fails, `ns=MIXED&fail=F&fault=SLOW|BROKEN` through
 * the real objects except caller F's, which is late or fails (one overloaded object beside healthy
 * ones); `on_error=open|closed` and `timeout_ms` set the failure policy; `GET /usage?name=N` reports the accounting of the object named N; `GET /many`
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

/** An object whose every decision fails (an object that is down or overloaded). */
export class BrokenObject extends RateLimiterObject {
  override hit(_key: string, _policy: RateLimitPolicy): Decision {
    throw new Error("Durable Object is overloaded. Too many requests queued.");
  }
}

/** How late {@linkcode SlowObject} answers, in ms. */
const SLOW_MS = 500;

interface Env {
  RATE_LIMITER: {
    idFromName(name: string): unknown;
    get(id: unknown): RateLimiterStub & { usage(): Promise<unknown> };
  };
  SLOW: RateLimiterNamespace;
  BROKEN: RateLimiterNamespace;
  LIMIT: string;
  WINDOW_SECONDS: string;
  SHARDS?: string;
}

/** One store per binding and policy, kept for the isolate's life as the service keeps its own. */
const stores = new Map<string, GuardedStore>();

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
 * The real objects, except `failing`'s, which is `faulty`'s (late or failing): one overloaded
 * object in a namespace of healthy ones.
 */
function mixed(env: Env, failing: string, faulty: RateLimiterNamespace): RateLimiterNamespace {
  const real = env.RATE_LIMITER as RateLimiterNamespace;
  const of = (name: string) => name === failing ? faulty : real;
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
  const fault = url.searchParams.get("fault") === "SLOW" ? "SLOW" : "BROKEN";
  const memo = url.searchParams.get("memo");
  const id = `${ns} ${onError} ${timeoutMs} ${failing} ${fault} ${memo}`;
  let store = stores.get(id);
  if (store === undefined) {
    const policy = { limit: Number(env.LIMIT), windowMs: Number(env.WINDOW_SECONDS) * 1000 };
    const namespace = ns === "MIXED"
      ? mixed(env, failing, env[fault])
      : ns === "RATE_LIMITER"
      ? counted(env.RATE_LIMITER as RateLimiterNamespace)
      : env[ns as "SLOW" | "BROKEN"];
    const shards = env.SHARDS === undefined ? {} : { shards: Number(env.SHARDS) };
    store = memo === "before" || memo === "unmerged"
      ? reference(namespace, memo, { policy, timeoutMs, onError })
      : createDurableObjectStore(namespace, { policy, timeoutMs, onError, ...shards });
    stores.set(id, store);
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
    return Response.json({ decision, byPolicy, promise, ms });
  },
};

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
