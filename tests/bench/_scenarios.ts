/**
 * The requests of the load benchmark, shared by the orchestrator (`load.ts`) and the reference servers
 * (`load_servers.ts`), so that the ceiling answers exactly what the service answers.
 *
 * @module
 */

/** One kind of request the load benchmark sends. */
export interface Scenario {
  /** Short name used in the report. */
  name: string;
  /** Request path. */
  path: string;
  /** `Accept` value, or `null` for none. */
  accept: string | null;
  /** Distinct `X-Forwarded-For` callers cycled by the wrk script (1 = one caller, soon limited). */
  callers: number;
  /** The status the service must answer. */
  status: number;
  /** Environment of the service (and of Hono) for this scenario, beyond the benchmark's own. */
  env?: Record<string, string>;
  /** Whether Hono + hono-rate-limiter runs this scenario too, as a peer. */
  peer?: boolean;
}

/**
 * The first benchmark a user runs: the limit raised so that one address hammering one endpoint is
 * always admitted, every request counted in its sliding log (a one-second window at tens of
 * thousands of requests per second: tens of requests per millisecond).
 */
export const HOT_CALLER_ENV = { RATE_LIMIT: "1000000", RATE_LIMIT_WINDOW_SECONDS: "1" };

/**
 * 262,144 callers at the service's rate (tens of thousands of requests per second) make a few requests
 * each per 60 s window: every request is admitted and the limiter looks up, trims and appends a real
 * sliding log, with about a quarter of a million callers tracked (below the default cap of 500,000).
 */
export const MANY_CALLERS = 262_144;

/** The scenarios, in report order. */
export const SCENARIOS: readonly Scenario[] = [
  {
    name: "json",
    path: "/api/v1/platform",
    accept: "application/json",
    callers: MANY_CALLERS,
    status: 200,
    peer: true,
  },
  {
    name: "hot",
    path: "/api/v1/platform",
    accept: "application/json",
    callers: 1,
    status: 200,
    env: HOT_CALLER_ENV,
    peer: true,
  },
  {
    name: "markdown",
    path: "/api/v1/platform",
    accept: "text/markdown",
    callers: MANY_CALLERS,
    status: 200,
  },
  { name: "404", path: "/nope", accept: "application/json", callers: MANY_CALLERS, status: 404 },
  { name: "429", path: "/api/v1/platform", accept: "application/json", callers: 1, status: 429 },
];

/** The `X-Forwarded-For` value the wrk script sends for caller number `n` (see `load.lua`). */
export function callerAddress(n: number, callers: number): string {
  if (callers === 1) return "10.255.255.255";
  const m = n % callers;
  return `10.${Math.floor(m / 65536) % 256}.${Math.floor(m / 256) % 256}.${m % 256}`;
}
