/**
 * The service's OpenTelemetry instruments, reported through Deno's own exporter (`OTEL_DENO=true`).
 *
 * Only `npm:@opentelemetry/api` is used: the runtime registers its tracer and meter providers under
 * the API's global, so instruments made here reach the same OTLP exporter as Deno's own
 * `http.server.request.duration` and spans, with no SDK (docs: runtime/fundamentals/open_telemetry.md,
 * "User metrics"). This module is imported by `load.ts` only when the runtime exports, so a service
 * without `OTEL_DENO` never loads the package.
 *
 * Each request's server span (made by `Deno.serve`) is renamed `METHOD route` and given `http.route`
 * before the handler answers: the runtime copies that attribute into `http.server.request.duration`
 * when the response is sent (ext/http/00_serve.ts, `op_http_copy_span_to_otel_info`). The limiter is
 * measured at its wrappers: the store the handler calls (decisions), the shared store under the
 * failure policy (calls, child spans), the `local-first` backend (syncs), and, read at each export,
 * the sizes and states the stores already keep. No attribute ever holds a caller's address or key.
 *
 * @module
 */

import {
  type Attributes,
  type Counter,
  type Histogram,
  type Meter,
  metrics,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
} from "@opentelemetry/api";
import type { Decision, RateLimitStore } from "../limit/core/decision.ts";
import type { FailureAnswer } from "../limit/guard/guarded_store.ts";
import type { HitLog, LogBatch } from "../limit/core/hit_log.ts";
import type { RateLimitStoreKind } from "../limit/open_store.ts";
import type { BreakerState } from "../limit/guard/circuit_breaker.ts";
import { requestPathOf } from "../http/message.ts";
import { exitFlushBoundMs, otelSignals } from "./enabled.ts";
import { armExitWatchdog } from "./exit_watchdog.ts";

/** The instrumentation scope of every instrument and span of the service. */
const SCOPE = "public-discovery-api";

/** The `http.route` of every path the service does not serve (one value, so one series). */
const UNKNOWN_ROUTE = "/*";

/**
 * How a rate-limit decision came about (`ratelimit.outcome`). An answer of the failure policy is
 * counted as such whatever the caller's exemption or the mode, so that an outage shows whoever it
 * answered.
 */
export type DecisionOutcome =
  | "admitted"
  | "limited"
  // The store failed as a whole (or, alone, this request's call): the policy answered.
  | "failure_policy_open"
  | "failure_policy_closed"
  // The caller's own object failed (Durable Objects) under `open`: the instance's own count
  // admitted it, or refused it over the limit (lib/limit/guard/guarded_store.ts, `localCount`).
  | "failure_policy_local_admitted"
  | "failure_policy_local_limited"
  // A would-be refusal of the store served: its caller is in RATE_LIMIT_EXEMPT, ...
  | "exempted"
  // ... or RATE_LIMIT_MODE=report (lib/limit/caller/caller_controls.ts).
  | "report_refused"
  // Answered 403 before any decision: the caller is in RATE_LIMIT_DENY.
  | "denied";

/** The operator's controls, as the decisions metric tells the refusals they serve apart. */
export interface DecisionControls {
  /** `RATE_LIMIT_MODE=report`: every would-be refusal is served. */
  report: boolean;
  /** Whether a caller key is exempt (undefined when no list is set). */
  exempt?: (key: string) => boolean;
}

/** How a call to a shared store ended (`ratelimit.store.outcome`, `ratelimit.sync.outcome`). */
export type CallOutcome = "ok" | "error" | "timeout";

/** A fetch handler as `Deno.serve` calls it. */
export type FetchHandler<I> = (request: Request, info: I) => Response | Promise<Response>;

/** What the store opened by `openRateLimitStore` may expose to be observed (read at each export). */
export interface ObservableStore {
  /**
   * Memory and `local-first` stores: callers tracked now, forgotten at the cap, and (`local-first`)
   * the bytes of hits waiting to be sent and the hits never sent (the backlog was full).
   */
  stats?: () => {
    tracked: number;
    evicted?: number;
    backlogBytes?: number;
    droppedHits?: number;
    unreadBatches?: number;
    futureHits?: number;
    tamperedEntries?: number;
  };
  /** The failure policy's guard: the breaker's state. */
  breakerState?: BreakerState;
  /**
   * The failure policy's guard: what answered a decision of the policy (`open`, `closed`, or the
   * instance's own count, `local`), undefined when the store decided.
   */
  failureAnswer?: (decision: Decision) => FailureAnswer | undefined;
  /**
   * Shared stores: the store's clock (or, Deno KV, the others' stamps) minus this instance's, in ms;
   * undefined before it was measured (`lib/limit/clock/store_clock.ts`).
   */
  clockOffsetMs?: () => number | undefined;
}

/** Options of {@linkcode createTelemetry}. */
export interface TelemetryOptions {
  /** The store's kind (`ratelimit.store`). */
  storeKind: RateLimitStoreKind;
  /** The store timeout, in ms: a call that took longer counts as `timeout`. */
  storeTimeoutMs: number;
  /** The sync timeout of `local-first`, in ms. */
  syncTimeoutMs: number;
  /** Every path the service serves (each is its own `http.route`). */
  paths: Iterable<string>;
  /** Clock in ms (default `Date.now`). */
  now?: () => number;
  /** Whether spans are exported (default: as the runtime says, `otelSignals`). */
  tracing?: boolean;
  /** How long a decision may wait before it is added to its counter, in ms (default 1,000). */
  decisionFlushMs?: number;
}

/** The service's telemetry: wrappers for the handler and the limiter, and the events it counts. */
export interface Telemetry {
  /** Names each request's server span after its route and method (tracing on; else `handler` itself). */
  wrapHandler<I>(handler: FetchHandler<I>): FetchHandler<I>;
  /**
   * Counts the decisions of `store` (the one the handler calls), and the requests it is told were
   * denied, and observes what it keeps; a refusal of the store that `controls` serve is counted as
   * `exempted` or `report_refused`, an answer of the failure policy as the policy's.
   */
  wrapDecisions(
    store: RateLimitStore & ObservableStore,
    controls?: DecisionControls,
  ): RateLimitStore;
  /** Times every call to the shared store of `exact`, each as a child span of its request. */
  wrapStore(store: RateLimitStore): RateLimitStore;
  /** Times every exchange of `local-first`, with its batch size and the time since the last good one. */
  wrapHitLog(log: HitLog): HitLog;
  /** Counts the breaker's transitions from the guard's incidents (`unavailable`, `recovered`). */
  incident(incident: { kind: string }): void;
  /** Counts the listener's accept failures and its time down. */
  listenerEvent(event: { kind: string; downMs?: number }): void;
  /**
   * Call right before `Deno.exit`: adds the decisions not yet added to their counter, so that the
   * exit's last export holds every one, then bounds the exit, whose last exports Deno 2.9.6
   * sometimes never finishes, to their own bound (3 x `OTEL_EXPORTER_OTLP_TIMEOUT`) and half a
   * second (`exit_watchdog.ts`).
   */
  beforeExit(): Promise<void>;
}

/** What the exit's watchdog allows beyond the exports' own bound, in ms. */
export const EXIT_WATCHDOG_MARGIN_MS = 500;

/** An environment variable, or undefined where it cannot be read (a compiled binary's list). */
function readEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

/**
 * Creates the service's instruments on the runtime's providers.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * // Without OTEL_DENO the API's providers are no-ops: the wrappers still pass everything through.
 * const telemetry = createTelemetry({
 *   storeKind: "memory",
 *   storeTimeoutMs: 100,
 *   syncTimeoutMs: 5000,
 *   paths: ["/"],
 *   tracing: true,
 * });
 * const handler = telemetry.wrapHandler(() => new Response("ok"));
 * assert.equal(await (await handler(new Request("http://localhost/"), {})).text(), "ok");
 * ```
 */
export function createTelemetry(options: TelemetryOptions): Telemetry {
  const meter = metrics.getMeter(SCOPE);
  const tracer = trace.getTracer(SCOPE);
  const store = options.storeKind;
  const breaker = breakerInstruments(meter, store);
  const listener = listenerInstruments(meter);
  // With tracing off (as documented) there is no span to name: nothing is added per request.
  const tracing = options.tracing ?? otelSignals()?.traces ?? false;
  const tally = new DecisionTally(meter, store, options.decisionFlushMs ?? TALLY_FLUSH_MS);
  return {
    wrapHandler: (handler) =>
      tracing ? routeNamingHandler(handler, new Set(options.paths)) : handler,
    wrapDecisions: (wrapped, controls) =>
      decisionCounting(wrapped, meter, { store, tally, controls, tracing }),
    wrapStore: (wrapped) => storeTiming(wrapped, meter, tracer, options),
    wrapHitLog: (log) => syncTiming(log, meter, options),
    incident(incident) {
      if (incident.kind === "unavailable") breaker.transitions.add(1, breaker.opened);
      if (incident.kind === "recovered") breaker.transitions.add(1, breaker.closed);
    },
    listenerEvent(event) {
      if (event.kind === "accept_failed") listener.failures.add(1);
      if (event.kind === "recovered") listener.down.add((event.downMs ?? 0) / 1000);
    },
    beforeExit() {
      tally.flush();
      return armExitWatchdog(exitFlushBoundMs(readEnv) + EXIT_WATCHDOG_MARGIN_MS);
    },
  };
}

/**
 * A handler that names the runtime's server span `METHOD route` and sets `http.route`, which the
 * runtime copies into `http.server.request.duration` when the response is sent. (The runtime's own
 * `url.full` and `url.query` keep the query string: a span's attribute set again is added, not
 * replaced, so the service cannot redact them; a collector's attributes processor can.)
 */
function routeNamingHandler<I>(
  handler: FetchHandler<I>,
  paths: ReadonlySet<string>,
): FetchHandler<I> {
  return (request, info) => {
    const span = trace.getActiveSpan();
    if (span !== undefined) {
      const path = requestPathOf(request.url, request.headers.get("host"));
      const route = paths.has(path) ? path : UNKNOWN_ROUTE;
      span.updateName(`${request.method} ${route}`);
      span.setAttribute("http.route", route);
    }
    return handler(request, info);
  };
}

/** The breaker's instruments: its state (observed) and its transitions (counted). */
function breakerInstruments(meter: Meter, store: RateLimitStoreKind) {
  const transitions = meter.createCounter("ratelimit.breaker.transitions", {
    description: "Circuit-breaker transitions of the shared store's failure policy",
    unit: "{transition}",
  });
  return {
    transitions,
    opened: { "ratelimit.store": store, "ratelimit.breaker.transition": "opened" },
    closed: { "ratelimit.store": store, "ratelimit.breaker.transition": "closed" },
  };
}

/** The listener's instruments: accept failures and the time spent not accepting. */
function listenerInstruments(meter: Meter) {
  return {
    failures: meter.createCounter("listener.accept.failures", {
      description:
        "Times accepting connections failed (descriptors exhausted): new connections are refused until the listener is back",
      unit: "{failure}",
    }),
    down: meter.createCounter("listener.down_time", {
      description: "Time the listener was down after accepting failed, counted when it is back",
      unit: "s",
    }),
  };
}

/** How long a decision may wait in {@linkcode DecisionTally} before it is added to the counter, in ms. */
export const TALLY_FLUSH_MS = 1000;

/**
 * The `ratelimit.decisions` counter, fed in batches. Each `add` of Deno's counter crosses into the
 * runtime with its attributes, about a microsecond: on the hot caller that was half of what the
 * documented configuration cost (tests/bench/README.md). Decisions are counted here in plain
 * numbers, one per outcome, and added at most {@linkcode TALLY_FLUSH_MS} after the first one not
 * yet added (one timer, only while some wait, so an idle service has none), and at exit
 * (`beforeExit`, and `unload` for the exits the runtime makes). Deno exports a counter's sum, so the exports hold the same totals, each at most
 * a second later.
 */
class DecisionTally {
  readonly #counter: Counter;
  readonly #attributes: Record<DecisionOutcome, Attributes>;
  readonly #pending = new Map<DecisionOutcome, number>();
  #timer: ReturnType<typeof setTimeout> | undefined;

  readonly #flushMs: number;

  constructor(meter: Meter, store: RateLimitStoreKind, flushMs: number) {
    this.#flushMs = flushMs;
    this.#counter = meter.createCounter("ratelimit.decisions", {
      description:
        "Rate-limit decisions by outcome, and requests denied before any (preflights are not counted)",
      unit: "{decision}",
    });
    this.#attributes = outcomeAttributes(store);
    // Every exit that is not the service's own stop (`deno serve`, whose runtime handles SIGTERM
    // in each worker) dispatches `unload` before its exporters' last export.
    globalThis.addEventListener("unload", () => this.flush());
  }

  /** Counts one decision. */
  count(outcome: DecisionOutcome): void {
    this.#pending.set(outcome, (this.#pending.get(outcome) ?? 0) + 1);
    if (this.#timer !== undefined) return;
    const timer = setTimeout(() => this.flush(), this.#flushMs);
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  /** Adds every decision counted so far to the counter. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const [outcome, count] of this.#pending) {
      this.#counter.add(count, this.#attributes[outcome]);
    }
    this.#pending.clear();
  }
}

/**
 * Counts every `hit` decision by outcome, and every request the handler says it denied
 * (`denied`: no decision is taken for it), and observes the store's sizes and breaker.
 */
function decisionCounting(
  store: RateLimitStore & ObservableStore,
  meter: Meter,
  options: {
    store: RateLimitStoreKind;
    tally: DecisionTally;
    controls?: DecisionControls | undefined;
    tracing: boolean;
  },
): RateLimitStore {
  const outcomeOf = decisionOutcomes(store, options.controls);
  const record = (key: string, decision: Decision): Decision => {
    const outcome = outcomeOf(key, decision);
    options.tally.count(outcome);
    if (!options.tracing) return decision;
    trace.getActiveSpan()?.setAttributes({
      "ratelimit.outcome": outcome,
      "ratelimit.remaining": decision.remaining,
    });
    return decision;
  };
  observeStore(store, meter, options.store);
  return {
    hit(key, now) {
      const decision = store.hit(key, now);
      return decision instanceof Promise
        ? decision.then((decided) => record(key, decided))
        : record(key, decision);
    },
    peek: (key, now) => store.peek(key, now),
    denied: () => options.tally.count("denied"),
    close: () => store.close(),
  };
}

/**
 * The outcome of a decision of `store`: first whether the failure policy answered (whatever the
 * caller's exemption or the mode: the policy's refusal served to an exempt caller is still an
 * outage's answer), then a refusal the handler serves (`exempted`, `report_refused`), then the
 * store's own `admitted` or `limited`.
 */
function decisionOutcomes(
  store: ObservableStore,
  controls: DecisionControls | undefined,
): (key: string, decision: Decision) => DecisionOutcome {
  const report = controls?.report ?? false;
  const exempt = controls?.exempt;
  return (key, decision) => {
    const failure = store.failureAnswer?.(decision);
    if (failure === "local") {
      return decision.allowed ? "failure_policy_local_admitted" : "failure_policy_local_limited";
    }
    if (failure !== undefined) return `failure_policy_${failure}`;
    if (decision.allowed) return "admitted";
    // A refusal the handler serves: an exempt caller's in either mode, anyone's in report mode.
    if (exempt?.(key)) return "exempted";
    return report ? "report_refused" : "limited";
  };
}

/** The attributes of each decision outcome, made once. */
function outcomeAttributes(store: RateLimitStoreKind): Record<DecisionOutcome, Attributes> {
  const of = (outcome: DecisionOutcome) => ({
    "ratelimit.outcome": outcome,
    "ratelimit.store": store,
  });
  return {
    admitted: of("admitted"),
    limited: of("limited"),
    failure_policy_open: of("failure_policy_open"),
    failure_policy_closed: of("failure_policy_closed"),
    failure_policy_local_admitted: of("failure_policy_local_admitted"),
    failure_policy_local_limited: of("failure_policy_local_limited"),
    exempted: of("exempted"),
    report_refused: of("report_refused"),
    denied: of("denied"),
  };
}

/** The gauges read at each export: callers tracked, forgotten at the cap, backlog, breaker state. */
function observeStore(store: ObservableStore, meter: Meter, kind: RateLimitStoreKind): void {
  const attributes = { "ratelimit.store": kind };
  const stats = store.stats?.bind(store);
  if (stats !== undefined) {
    meter.createObservableGauge("ratelimit.callers.tracked", {
      description: "Callers the store tracks now (memory: bounded by RATE_LIMIT_MAX_CALLERS)",
      unit: "{caller}",
    }).addCallback((result) => result.observe(stats().tracked, attributes));
  }
  if (stats !== undefined && stats().evicted !== undefined) {
    meter.createObservableCounter("ratelimit.callers.forgotten", {
      description: "Callers the memory store forgot because its cap was reached",
      unit: "{caller}",
    }).addCallback((result) => result.observe(stats().evicted ?? 0, attributes));
  }
  if (stats !== undefined && stats().backlogBytes !== undefined) {
    meter.createObservableGauge("ratelimit.sync.backlog", {
      description: "Bytes of admitted hits waiting to be sent to the hit log (local-first)",
      unit: "By",
    }).addCallback((result) => result.observe(stats().backlogBytes ?? 0, attributes));
    meter.createObservableCounter("ratelimit.sync.dropped", {
      description: "Admitted hits never sent to the hit log: the backlog was full (local-first)",
      unit: "{hit}",
    }).addCallback((result) => result.observe(stats().droppedHits ?? 0, attributes));
    meter.createObservableCounter("ratelimit.sync.untrusted", {
      description:
        "Entries of the hit log not trusted (local-first): unreadable (skipped), future (hits clamped to now), tampered (moved another writer's numbers)",
      unit: "{entry}",
    }).addCallback((result) => {
      const now = stats();
      result.observe(now.unreadBatches ?? 0, {
        ...attributes,
        "ratelimit.sync.cause": "unreadable",
      });
      result.observe(now.futureHits ?? 0, { ...attributes, "ratelimit.sync.cause": "future" });
      result.observe(now.tamperedEntries ?? 0, {
        ...attributes,
        "ratelimit.sync.cause": "tampered",
      });
    });
  }
  const offset = store.clockOffsetMs?.bind(store);
  if (offset !== undefined) {
    meter.createObservableGauge("ratelimit.clock.offset", {
      description:
        "The shared store's clock minus this instance's (Deno KV: how far another instance's stamps are ahead), positive when this instance is behind",
      unit: "s",
    }).addCallback((result) => {
      const ms = offset();
      if (ms !== undefined) result.observe(ms / 1000, attributes);
    });
  }
  if (store.breakerState !== undefined) {
    const states: BreakerState[] = ["closed", "open", "half-open"];
    meter.createObservableUpDownCounter("ratelimit.breaker.state", {
      description: "The circuit breaker's state: 1 for the current state, 0 for the others",
      unit: "{state}",
    }).addCallback((result) => {
      const now = store.breakerState;
      for (const state of states) {
        result.observe(state === now ? 1 : 0, { ...attributes, "ratelimit.breaker.state": state });
      }
    });
  }
}

/** A call's outcome from how it ended and how long it took. */
function outcomeOf(failed: boolean, ms: number, timeoutMs: number): CallOutcome {
  if (ms >= timeoutMs) return "timeout";
  return failed ? "error" : "ok";
}

/**
 * Times every call to the shared store (`ratelimit.store.duration`), each in a child span of the
 * request's server span. A call that outlives the store timeout is recorded as `timeout` when it
 * settles (the failure policy has answered its request by then).
 */
function storeTiming(
  store: RateLimitStore,
  meter: Meter,
  tracer: Tracer,
  options: TelemetryOptions,
): RateLimitStore {
  const duration = meter.createHistogram("ratelimit.store.duration", {
    description: "Duration of calls to the shared rate-limit store (exact consistency)",
    unit: "s",
    advice: { explicitBucketBoundaries: STORE_BUCKETS },
  });
  const timed = (operation: "hit" | "peek", call: () => Decision | Promise<Decision>) => {
    const span = tracer.startSpan(`ratelimit.store ${operation}`, {
      kind: SpanKind.CLIENT,
      attributes: { "ratelimit.store": options.storeKind, "ratelimit.operation": operation },
    });
    const started = performance.now();
    const done = (failed: boolean) =>
      finishCall(span, duration, {
        operation,
        store: options.storeKind,
        outcome: outcomeOf(failed, performance.now() - started, options.storeTimeoutMs),
        seconds: (performance.now() - started) / 1000,
      });
    let result: Decision | Promise<Decision>;
    try {
      result = call();
    } catch (error) {
      done(true);
      throw error;
    }
    if (!(result instanceof Promise)) return done(false), result;
    return result.then((decision) => (done(false), decision), (error) => {
      done(true);
      throw error;
    });
  };
  return {
    hit: (key, now) => timed("hit", () => store.hit(key, now)),
    peek: (key, now) => timed("peek", () => store.peek(key, now)),
    close: () => store.close(),
  };
}

/** Bucket boundaries of the store and sync durations, in s: 0.25 ms to 10 s. */
const STORE_BUCKETS = [
  0.00025,
  0.0005,
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
];

/** Records one store call in the histogram and ends its span. */
function finishCall(
  span: Span,
  duration: Histogram,
  call: { operation: string; store: string; outcome: CallOutcome; seconds: number },
): void {
  duration.record(call.seconds, {
    "ratelimit.store": call.store,
    "ratelimit.operation": call.operation,
    "ratelimit.store.outcome": call.outcome,
  });
  span.setAttribute("ratelimit.store.outcome", call.outcome);
  if (call.outcome !== "ok") span.setStatus({ code: SpanStatusCode.ERROR, message: call.outcome });
  span.end();
}

/**
 * Times every exchange of `local-first`'s hit log, records the bytes of hits it sent, and observes
 * the last good one's age.
 */
function syncTiming(log: HitLog, meter: Meter, options: TelemetryOptions): HitLog {
  const now = options.now ?? Date.now;
  const attributes = { "ratelimit.store": options.storeKind };
  const duration = meter.createHistogram("ratelimit.sync.duration", {
    description: "Duration of local-first exchanges with the hit log (one batch each)",
    unit: "s",
    advice: { explicitBucketBoundaries: STORE_BUCKETS },
  });
  const size = meter.createHistogram("ratelimit.sync.batch.size", {
    description: "Bytes of hits one local-first exchange sent",
    unit: "By",
  });
  let lastGood = now();
  meter.createObservableGauge("ratelimit.sync.age", {
    description:
      "Time since the last local-first exchange that succeeded (since start before the first)",
    unit: "s",
  }).addCallback((result) => result.observe((now() - lastGood) / 1000, attributes));
  const exchange = async (mine: LogBatch | null) => {
    const started = performance.now();
    const record = (failed: boolean) => {
      const ms = performance.now() - started;
      const outcome = outcomeOf(failed, ms, options.syncTimeoutMs);
      duration.record(ms / 1000, { ...attributes, "ratelimit.sync.outcome": outcome });
      size.record(mine?.hits.length ?? 0, attributes);
      if (outcome === "ok") lastGood = now();
    };
    try {
      const reply = await log.exchange(mine);
      record(false);
      return reply;
    } catch (error) {
      record(true);
      throw error;
    }
  };
  return {
    exchange,
    get roundTrips() {
      return log.roundTrips;
    },
    get maxBatchBytes() {
      return log.maxBatchBytes;
    },
    get more() {
      return log.more;
    },
    get health() {
      return log.health;
    },
    close: () => log.close(),
  };
}
