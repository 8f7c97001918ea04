/**
 * The failure policy of a shared rate-limit store: a bound on every call, and what to answer when the
 * store is slow or down.
 *
 * {@linkcode GuardedStore} wraps any store. A call that fails or takes longer than `timeoutMs` is
 * answered by the policy: `open` admits (uncounted), `closed` refuses with a 429 whose code is
 * `rate_limit_unavailable`. Either way nothing is thrown, so the handler never answers 5xx because of
 * the store. One failed or slow call answers only its own request: a {@linkcode CircuitBreaker}
 * switches the instance to the policy when failures are sustained (by default 5 or more, and half or
 * more of the last 20 calls within 10 s). Then the store is left alone for `probeIntervalMs`; one
 * request probes it while the others are still answered by the policy, and the first success ends
 * the incident. An incident is reported twice to the injected logger, when it starts and when it
 * ends, however many requests it spans.
 *
 * Whose failure it is: a store that is one server for every caller (Redis, Deno KV) fails for all,
 * and the breaker above is the store's. A store that is many objects (Durable Objects: one per
 * caller, or per shard) names each call's object (`failureScope`), and a failure is that object's
 * (`object_failures.ts`): its own breaker, its callers alone answered by the policy (under `open`
 * within the instance's own count of them, `localCount`: a failing object is no way around the
 * limit), each said in a line per window at most. The store is down as a whole only when objects
 * no caller owns fail too (`canaries`): then the policy answers every caller without a call, one
 * incident, until a canary answers again. No number of failing caller keys changes a healthy
 * caller's answer.
 *
 * In front of it all, the store's refusals are answered from memory for a few seconds at most,
 * never past their end ({@linkcode RefusalMemo}): no call, no failure to count; and the requests
 * of a caller likely refused wait for the one call in flight for it ({@linkcode CallsInFlight}).
 *
 * The timeout times the store's answer, not the event loop's queue: a timer that fires more than
 * {@linkcode LOOP_LAG_TOLERANCE_MS} late found the loop busy, and an answer that arrived meanwhile
 * may be waiting unread, so the call gets another `timeoutMs` (at most {@linkcode MAX_EXTENSIONS}
 * times) before it counts as timed out.
 *
 * @module
 */

import {
  type BreakerState,
  CircuitBreaker,
  type CircuitBreakerOptions,
} from "./circuit_breaker.ts";
import type { CallerNotice } from "./caller_notices.ts";
import { ObjectFailures } from "./object_failures.ts";
import {
  type Decision,
  freshWindow,
  pending,
  type RateLimitPolicy,
  type RateLimitStore,
} from "../core/decision.ts";
import { RefusalMemo, type RefusalMemoOptions } from "./refusal_memo.ts";
import { CallsInFlight } from "./in_flight.ts";
import { raceTimer } from "../../timer.ts";
import { namedMessageOf } from "../../text/error_message.ts";

/** How late a timeout's timer may fire before the loop counts as busy, in ms. */
export const LOOP_LAG_TOLERANCE_MS = 10;

/** How many times a call's deadline is extended because the loop was busy when it expired. */
export const MAX_EXTENSIONS = 3;

/**
 * The most store timeouts (`RATE_LIMIT_STORE_TIMEOUT_MS`) one decision of a store of one server
 * (Redis, Deno KV) waits, beside the event loop's own delays: one for other requests' calls in
 * flight for its caller (`in_flight.ts`, one deadline for all its waits), then its own call's, and
 * that one's {@linkcode MAX_EXTENSIONS} while the loop was late. A proxy in front of the service
 * waits longer than this for an answer (deploy/README.md, "When an instance hangs or stops").
 */
export const MOST_TIMEOUTS_PER_DECISION = 2 + MAX_EXTENSIONS;

/** What to do when the store cannot decide: admit (`open`) or refuse (`closed`). */
export type StoreFailurePolicy = "open" | "closed";

/** The two reports of an incident. */
export type StoreIncident =
  | {
    /** The store failed or timed out; requests are answered by the policy from now on. */
    kind: "unavailable";
    /** The policy applied. */
    policy: StoreFailurePolicy;
    /** The first error, as `Name: message`. */
    error: string;
  }
  | {
    /** The store answered again; limiting has resumed. */
    kind: "recovered";
    /** How long the incident lasted, in ms. */
    downMs: number;
    /** Requests answered by the policy during the incident. */
    answeredByPolicy: number;
  };

/** Options of {@linkcode GuardedStore}. */
export interface GuardOptions {
  /** The limit and window, for the answers the policy gives. */
  policy: RateLimitPolicy;
  /** The longest a store call may take, in ms. */
  timeoutMs: number;
  /** What to answer when the store fails or times out. */
  onError: StoreFailurePolicy;
  /** Receives the start and the end of every incident. */
  onIncident?: (incident: StoreIncident) => void;
  /** How long to leave a failed store alone before probing it again, in ms (default 1000). */
  probeIntervalMs?: number;
  /** Clock for the probe interval and incident durations; defaults to `Date.now`. */
  clock?: () => number;
  /** When to trip (the window of calls and the failure rate); see {@linkcode CircuitBreaker}. */
  breaker?: Omit<CircuitBreakerOptions, "probeIntervalMs" | "clock">;
  /**
   * The object that answers `key`'s calls, when the store is many objects that fail one by one
   * (Durable Objects); omitted, every failure is the whole store's (one server: Redis, Deno KV).
   */
  failureScope?: (key: string) => string;
  /**
   * With `failureScope`: calls to objects of the store that no caller owns, each answering (or
   * throwing, or never settling) as the store does; bounded here by `timeoutMs`. When a caller's
   * object fails and every canary fails too, the store is down as a whole. Omitted, it never is:
   * each object answers for itself.
   */
  canaries?: ReadonlyArray<() => unknown>;
  /**
   * With `failureScope`, under `open`: makes (when first needed) the store that counts the callers
   * answered by the policy because their own object failed, the instance's own memory store, so
   * that such a caller gets at most the limit per window here. Omitted, it is admitted uncounted.
   */
  localCount?: () => RateLimitStore;
  /**
   * With `failureScope`: told of the callers answered by the policy because their own object failed
   * (`caller_notices.ts`: a line per caller per window at most, ten callers a window), each named by
   * `label` (truncated: never a full address).
   */
  callerNotices?: { label: (key: string) => string; write: (notice: CallerNotice) => void };
  /** Answers the store's refusals from memory for a few seconds at most (default true). */
  memoRefusals?: boolean;
  /** The memo's hold, spread and randomness (defaults: `refusal_memo.ts`; tests, benchmarks). */
  memo?: Pick<RefusalMemoOptions, "holdMs" | "spreadMs" | "random">;
  /** Lets a likely refused caller's requests wait for its one call in flight (default true). */
  mergeInFlight?: boolean;
  /** The steady clock the memo of refusals runs by, in ms (default `performance.now`). */
  steadyClock?: () => number;
  /** How much faster than the steady clock the store's clock may run (see `RefusalMemoOptions`). */
  storeClockRate?: number;
}

/** What answered a decision of the failure policy: `open`, `closed`, or the instance's own count. */
export type FailureAnswer = StoreFailurePolicy | "local";

/** Raised (and caught by the guard) when a store call outlives `timeoutMs`. */
export class StoreTimeoutError extends Error {
  /** Creates the error for a bound of `timeoutMs`. */
  constructor(timeoutMs: number) {
    super(`rate-limit store did not answer within ${timeoutMs} ms`);
    this.name = "StoreTimeoutError";
  }
}

interface Incident {
  since: number;
  answered: number;
}

/**
 * A store that bounds every call of `store` and applies a failure policy.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import type { StoreIncident } from "./guarded_store.ts";
 * const down = {
 *   hit: () => Promise.reject(new Error("connection refused")),
 *   peek: () => Promise.reject(new Error("connection refused")),
 *   close() {},
 * };
 * const incidents: StoreIncident[] = [];
 * const store = new GuardedStore(down, {
 *   policy: { limit: 60, windowMs: 60_000 },
 *   timeoutMs: 100,
 *   onError: "open",
 *   onIncident: (incident) => incidents.push(incident),
 * });
 * // Open: admitted, nothing counted. One failed call answers only its own request...
 * assert.equal((await store.hit("192.0.2.1", 0)).allowed, true);
 * assert.equal(incidents.length, 0);
 * // ...five in a row trip the breaker, and the incident is reported once.
 * for (let i = 0; i < 4; i++) await store.hit("192.0.2.1", 0);
 * assert.deepEqual(incidents.map((incident) => incident.kind), ["unavailable"]);
 * await store.close();
 * ```
 */
export class GuardedStore implements RateLimitStore {
  readonly #store: RateLimitStore;
  readonly #timeoutMs: number;
  readonly #onIncident: ((incident: StoreIncident) => void) | undefined;
  readonly #probeIntervalMs: number;
  readonly #clock: () => number;
  readonly #breaker: CircuitBreaker;
  #lone = 0;
  readonly #hitFallback: Decision;
  readonly #peekFallback: Decision;
  #incident: Incident | undefined;
  readonly #policy: StoreFailurePolicy;
  readonly #seen = new LastDecisions();
  readonly #freshWindow: Decision;
  readonly #objects: ObjectFailures | undefined;
  readonly #memo: RefusalMemo | undefined;
  readonly #flights: CallsInFlight | undefined;
  readonly #steady: () => number;
  #fromMemory = 0;

  /** Wraps `store`. */
  constructor(store: RateLimitStore, options: GuardOptions) {
    this.#store = store;
    this.#timeoutMs = options.timeoutMs;
    this.#policy = options.onError;
    this.#onIncident = options.onIncident;
    this.#probeIntervalMs = options.probeIntervalMs ?? 1000;
    this.#clock = options.clock ?? Date.now;
    const breaker = {
      ...options.breaker,
      probeIntervalMs: this.#probeIntervalMs,
      clock: this.#clock,
    };
    this.#breaker = new CircuitBreaker(breaker);
    this.#memo = options.memoRefusals === false
      ? undefined
      : new RefusalMemo({ ...options.memo, clockRate: options.storeClockRate ?? 0 });
    this.#flights = this.#memo === undefined || options.mergeInFlight === false
      ? undefined
      : new CallsInFlight(this.#memo, { waitMs: options.timeoutMs, clock: () => this.#steady() });
    this.#steady = options.steadyClock ?? (() => performance.now());
    const { limit, windowMs } = options.policy;
    // A caller with nothing counted: the whole quota over the whole window, never `t=0`.
    this.#freshWindow = freshWindow(options.policy);
    if (options.onError === "open") {
      // Admitted without counting: answer as a fresh window would, so the headers stay plausible
      // (remaining below the limit, reset within the window) and clients do not back off.
      this.#hitFallback = { allowed: true, remaining: limit - 1, resetSeconds: windowMs / 1000 };
      this.#peekFallback = freshWindow(options.policy);
    } else {
      // Retry when the store will next be probed.
      const retry = Math.max(1, Math.ceil(this.#probeIntervalMs / 1000));
      this.#hitFallback = { allowed: false, remaining: 0, resetSeconds: retry, unavailable: true };
      this.#peekFallback = this.#hitFallback;
    }
    this.#objects = options.failureScope && this.#objectFailures(options, breaker);
  }

  /** The path of calls to a store of many objects (`object_failures.ts`). */
  #objectFailures(options: GuardOptions, breaker: CircuitBreakerOptions): ObjectFailures {
    const canaries = options.canaries ?? [];
    return new ObjectFailures({
      scopeOf: options.failureScope!,
      canaries: canaries.map((canary) => () => this.#bounded(Promise.resolve(canary()))),
      policy: options.policy,
      open: options.onError === "open",
      fallback: this.#hitFallback,
      localCount: options.localCount,
      notices: options.callerNotices,
      breaker,
      probeIntervalMs: this.#probeIntervalMs,
      clock: this.#clock,
      bounded: (result) => this.#bounded(result),
      incident: {
        start: (error) => this.#startIncident(error, 0),
        answered: () => this.#incident && this.#incident.answered++,
        end: () => this.#endIncident(),
      },
    });
  }

  /** Whether the store is answering (no incident under way). */
  get healthy(): boolean {
    return this.#incident === undefined;
  }

  /** Requests answered by the policy because their own call failed, outside any incident. */
  get answeredAlone(): number {
    return this.#lone;
  }

  /** Requests refused from memory (the store's refusal still holding): no store call. */
  get answeredFromMemory(): number {
    return this.#fromMemory;
  }

  /** Times a request of a likely refused caller waited for the call in flight for it. */
  get waitedInFlight(): number {
    return this.#flights?.waits ?? 0;
  }

  /**
   * Requests answered by the policy because their own object failed (its call, or its breaker),
   * the store being up as a whole (a store of many objects).
   */
  get answeredForObject(): number {
    return this.#objects?.answeredForObject ?? 0;
  }

  /** Objects whose own breaker is open or probing now (a store of many objects). */
  get failingObjects(): number {
    return this.#objects?.failingObjects ?? 0;
  }

  /**
   * Where the circuit breaker stands (for the `ratelimit.breaker.state` metric): the store's, or for
   * a store of many objects its namespace's (`open` while the canaries fail too).
   */
  get breakerState(): BreakerState {
    return this.#objects?.state ?? this.#breaker.state;
  }

  /** The failure policy this guard answers by. */
  get failurePolicy(): StoreFailurePolicy {
    return this.#policy;
  }

  /** Whether `decision` is an answer of the failure policy rather than the store's. */
  answeredByPolicy(decision: Decision): boolean {
    return this.failureAnswer(decision) !== undefined;
  }

  /**
   * What answered `decision` when the failure policy did: `open`, `closed`, or `local` (the
   * instance's own count of a caller whose object failed); undefined when the store decided.
   */
  failureAnswer(decision: Decision): FailureAnswer | undefined {
    if (decision === this.#hitFallback || decision === this.#peekFallback) return this.#policy;
    return this.#objects?.countedHere(decision) ? "local" : undefined;
  }

  /** {@inheritDoc RateLimitStore.hit} */
  hit(key: string, now: number): Decision | Promise<Decision> {
    return this.#hit(key, now, undefined);
  }

  /**
   * {@linkcode hit}, for a request that may have waited already: `waitUntil` (steady clock) is when
   * its waiting for other requests' calls ends, `timeoutMs` after it first waited, however many
   * times it is woken and finds another call in flight; then it makes its own call. Decided again
   * after a wait, it passes the store `now` moved on by the time waited.
   */
  #hit(key: string, now: number, waitUntil: number | undefined): Decision | Promise<Decision> {
    const sent = this.#steady();
    const memo = this.#memo?.recall(key, sent);
    if (memo !== undefined) {
      this.#fromMemory++;
      return memo;
    }
    const flights = this.#flights;
    if (flights?.mustWait(key, sent)) {
      const until = waitUntil ?? sent + this.#timeoutMs;
      if (sent < until) {
        return flights.next(key, until).then(() =>
          this.#hit(key, now + (this.#steady() - sent), until)
        );
      }
    }
    flights?.sent(key);
    const result = this.#call(key, now, () => this.#store.hit(key, now));
    return pending(result)
      ? Promise.resolve(result).then((decision) => this.#remember(key, now, sent, decision))
      : this.#remember(key, now, sent, result);
  }

  /**
   * Keeps the store's own decisions for {@linkcode peek} and the memo (from `sent`, when the call
   * started); the failure policy's say nothing, and release the requests waiting on this caller.
   * Then wakes those waiting for this call.
   */
  #remember(key: string, now: number, sent: number, decision: Decision): Decision {
    if (this.answeredByPolicy(decision)) this.#memo?.release(key, this.#steady());
    else {
      this.#memo?.remember(key, sent, decision);
      this.#seen.remember(key, now, decision);
    }
    this.#flights?.answered(key);
    return decision;
  }

  /**
   * What this instance last saw of `key`, from local state: no store round trip. Only CORS
   * preflights peek (never counted, never refused: `preflightDecision`), and a browser sends one
   * before each cross-origin request, so a store call per preflight would let 3,000 preflights from
   * a caller at 0 cost 3,000 round trips. Their RateLimit fields are this instance's last view of the
   * caller (its last decision, the reset counted down since), or a fresh window for a caller it has
   * not seen; the request that follows gets the store's exact answer.
   */
  peek(key: string, now: number): Decision {
    return this.#seen.recall(key, now) ?? this.#freshWindow;
  }

  /** {@inheritDoc RateLimitStore.close} */
  close(): void | Promise<void> {
    return this.#store.close();
  }

  #call(
    key: string,
    now: number,
    call: () => Decision | Promise<Decision>,
  ): Decision | Promise<Decision> {
    // A store of many objects: each failure is its object's (`object_failures.ts`).
    if (this.#objects !== undefined) return this.#objects.call(key, now, call);
    const fallback = this.#hitFallback;
    if (!this.#breaker.allow()) {
      this.#incident!.answered++;
      return fallback;
    }
    let result: Decision | Promise<Decision>;
    try {
      result = call();
    } catch (error) {
      this.#failed(error);
      return fallback;
    }
    if (!pending(result)) {
      this.#succeeded();
      return result;
    }
    return this.#bounded(Promise.resolve(result)).then(
      (decision) => {
        this.#succeeded();
        return decision;
      },
      (error) => {
        this.#failed(error);
        return fallback;
      },
    );
  }

  #bounded<T>(result: Promise<T>): Promise<T> {
    const timeoutMs = this.#timeoutMs;
    let due = performance.now() + timeoutMs;
    let extensions = 0;
    return raceTimer(result, timeoutMs, () => {
      const now = performance.now();
      if (now - due > LOOP_LAG_TOLERANCE_MS && extensions < MAX_EXTENSIONS) {
        // The loop was busy: the answer may be read in the next turn. Time it again from here.
        extensions++;
        due = now + timeoutMs;
        return { wait: timeoutMs };
      }
      throw new StoreTimeoutError(timeoutMs);
    });
  }

  #failed(error: unknown): void {
    const incident = this.#incident;
    const transition = this.#breaker.failure();
    if (incident !== undefined) {
      incident.answered++;
      return;
    }
    if (transition !== "tripped") {
      // One failure is not an outage: only this request was answered by the policy.
      this.#lone++;
      return;
    }
    this.#startIncident(error, 1);
  }

  #succeeded(): void {
    this.#breaker.success();
    this.#endIncident();
  }

  /** Starts an incident (`answered`: the requests the policy answered in it so far). */
  #startIncident(error: unknown, answered: number): void {
    this.#incident = { since: this.#clock(), answered };
    this.#onIncident?.({
      kind: "unavailable",
      policy: this.#policy,
      error: namedMessageOf(error),
    });
  }

  #endIncident(): void {
    const incident = this.#incident;
    if (incident === undefined) return;
    this.#incident = undefined;
    this.#onIncident?.({
      kind: "recovered",
      downMs: this.#clock() - incident.since,
      answeredByPolicy: incident.answered,
    });
  }
}

/** Most callers whose last decision a {@linkcode GuardedStore} keeps; beyond it it starts again. */
export const LAST_DECISIONS_LIMIT = 4096;

/**
 * The last decision this instance got for each recent caller, bounded ({@linkcode
 * LAST_DECISIONS_LIMIT} callers, then cleared, as the handler's memos are): what a preflight is
 * answered from.
 */
class LastDecisions {
  readonly #decisions = new Map<string, { decision: Decision; at: number }>();

  /** Keeps `decision` as `key`'s latest and returns it. */
  remember(key: string, now: number, decision: Decision): Decision {
    if (this.#decisions.size >= LAST_DECISIONS_LIMIT && !this.#decisions.has(key)) {
      this.#decisions.clear();
    }
    this.#decisions.set(key, { decision, at: now });
    return decision;
  }

  /** `key`'s latest decision with its reset counted down to `now`, if it is still within it. */
  recall(key: string, now: number): Decision | undefined {
    const seen = this.#decisions.get(key);
    if (seen === undefined) return undefined;
    const left = seen.decision.resetSeconds - Math.floor((now - seen.at) / 1000);
    if (left <= 0) {
      this.#decisions.delete(key);
      return undefined;
    }
    return { allowed: true, remaining: seen.decision.remaining, resetSeconds: left };
  }
}
