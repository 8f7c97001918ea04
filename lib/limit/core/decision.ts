/**
 * The sliding-log decision every rate-limit store makes, and the header fields that report it.
 *
 * A caller is admitted when fewer than `limit` of its counted requests lie in the last `window`
 * milliseconds (a sliding log: no estimate, no fixed buckets). Requests answered 429 are not counted.
 * State lives behind {@linkcode RateLimitStore} so that several instances can share it; every store
 * (memory, Deno KV, Redis) decides with {@linkcode decide} and reports with {@linkcode peekDecision}.
 *
 * @module
 */

/** The limit and window every caller gets. */
export interface RateLimitPolicy {
  /** Requests admitted in any window. */
  limit: number;
  /** Window length in milliseconds (a whole number of seconds). */
  windowMs: number;
}

/** The outcome of one rate-limit look-up. */
export interface Decision {
  /** Whether the request is admitted (and was counted). */
  allowed: boolean;
  /** Requests left in the window after this one. */
  remaining: number;
  /**
   * The effective window (draft-ietf-httpapi-ratelimit-headers-11's `t`): the seconds within which
   * no more than `remaining` requests may be made. Counted: until the oldest counted request leaves
   * the window, rounded up. Nothing counted: the whole window, never 0 (a zero-second window with
   * the whole quota is what -11 section 6 asks servers to avoid).
   */
  resetSeconds: number;
  /** Set when the store could not decide and the request was refused by the failure policy. */
  unavailable?: true;
  /**
   * On a refusal by the sliding log: the milliseconds until the oldest counted request leaves the
   * window, by the clock that decided (`resetSeconds` is it rounded up). The refusal holds that long
   * unless the store forgets, so an instance may answer the caller from memory for a bounded part
   * of it (`guard/refusal_memo.ts`). An ordinary field, so that every copy keeps it: a spread, a
   * wrapper, a structured clone (a Durable Object's RPC answer). Nothing the service writes is
   * built from a whole decision: the header fields name `remaining` and `resetSeconds`
   * ({@linkcode rateLimitFields}), the response cache keys on them, the access log and the metric
   * on the outcome. Absent on admissions and on the failure policy's answers.
   */
  resetMs?: number;
}

/**
 * Where rate-limit state lives. `hit` counts the request when it is admitted; `peek` only reports.
 * Both may answer synchronously, so that the in-memory store costs no promise on the hot path.
 */
export interface RateLimitStore {
  /** Decides on a request of `key` at time `now` (ms since the epoch) and counts it if admitted. */
  hit(key: string, now: number): Decision | Promise<Decision>;
  /** Reports the state of `key` at `now` without counting anything. */
  peek(key: string, now: number): Decision | Promise<Decision>;
  /**
   * Told of a request of `key` answered 403 before any decision (`RATE_LIMIT_DENY`): a store counts
   * nothing for it; an observer of the decisions counts it (the decisions metric's `denied`).
   */
  denied?(key: string): void;
  /** Releases timers and connections. */
  close(): void | Promise<void>;
}

/**
 * Converts the delta until the oldest counted request leaves the window into whole seconds, rounded up.
 */
export function resetSecondsOf(oldest: number, now: number, windowMs: number): number {
  return Math.max(0, Math.ceil((oldest + windowMs - now) / 1000));
}

/**
 * The pure sliding-log decision over a caller's counted timestamps (ascending, all inside the window).
 * Reset counts from the oldest request counted once this one is: `now` itself when the clock has
 * stepped back behind `oldest`.
 *
 * @returns the decision; the caller adds `now` to its log when `allowed`
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const policy = { limit: 2, windowMs: 60_000 };
 * assert.deepEqual(decide(1, 0, 500, policy), { allowed: true, remaining: 0, resetSeconds: 60 });
 * // A refusal carries its exact reset in ms, an ordinary field that every copy keeps.
 * const refused = decide(2, 0, 500, policy);
 * assert.deepEqual({ ...refused }, { allowed: false, remaining: 0, resetSeconds: 60, resetMs: 59_500 });
 * ```
 */
export function decide(
  count: number,
  oldest: number | undefined,
  now: number,
  policy: RateLimitPolicy,
): Decision {
  if (count < policy.limit) {
    const first = oldest === undefined ? now : Math.min(oldest, now);
    return {
      allowed: true,
      remaining: policy.limit - count - 1,
      resetSeconds: resetSecondsOf(first, now, policy.windowMs),
    };
  }
  const resetMs = Math.max(0, (oldest ?? now) + policy.windowMs - now);
  return { allowed: false, remaining: 0, resetSeconds: Math.ceil(resetMs / 1000), resetMs };
}

/**
 * What a look-up without counting reports, given the caller's live count and oldest timestamp: the
 * same answer as `MemoryStore.peek`. A caller with nothing counted has the whole quota over the
 * whole window ({@linkcode freshWindow}).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const policy = { limit: 60, windowMs: 60_000 };
 * assert.deepEqual(peekDecision(0, undefined, 0, policy), { allowed: true, remaining: 60, resetSeconds: 60 });
 * assert.deepEqual(peekDecision(1, 0, 15_000, policy), { allowed: true, remaining: 59, resetSeconds: 45 });
 * ```
 */
export function peekDecision(
  count: number,
  oldest: number | undefined,
  now: number,
  policy: RateLimitPolicy,
): Decision {
  if (count === 0 || oldest === undefined) return freshWindow(policy);
  return {
    allowed: count < policy.limit,
    remaining: Math.max(0, policy.limit - count),
    resetSeconds: resetSecondsOf(oldest, now, policy.windowMs),
  };
}

/**
 * What a caller with nothing counted is told: the whole quota over the whole window (`r=q;t=w`),
 * the effective window of a sliding log that holds nothing. Every answer about such a caller (a
 * store's peek, the failure policy's guard) is this one.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(freshWindow({ limit: 60, windowMs: 60_000 }), { allowed: true, remaining: 60, resetSeconds: 60 });
 * ```
 */
export function freshWindow(policy: RateLimitPolicy): Decision {
  return {
    allowed: true,
    remaining: policy.limit,
    resetSeconds: Math.round(policy.windowMs / 1000),
  };
}

/** Inserts `t` into the ascending `log` after every timestamp not above it. */
export function insertInOrder(log: number[], t: number): void {
  let i = log.length;
  while (i > 0 && log[i - 1]! > t) i--;
  log.splice(i, 0, t);
}

/** The settings a policy is made of, as the configuration names them. */
export interface PolicySettings {
  /** Requests admitted per caller in any window. */
  rateLimit: number;
  /** Window length in seconds. */
  rateLimitWindowSeconds: number;
}

/**
 * The rate-limit policy of the configuration's settings.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(policyOf({ rateLimit: 60, rateLimitWindowSeconds: 60 }), {
 *   limit: 60,
 *   windowMs: 60_000,
 * });
 * ```
 */
export function policyOf(settings: PolicySettings): RateLimitPolicy {
  return { limit: settings.rateLimit, windowMs: settings.rateLimitWindowSeconds * 1000 };
}

/** Builds the `RateLimit-Policy` value: `"default";q=60;w=60`. */
export function policyHeader(policy: RateLimitPolicy): string {
  return `"default";q=${policy.limit};w=${Math.round(policy.windowMs / 1000)}`;
}

/** The values of the rate-limit fields that are the same on every response. */
export interface RateLimitConstants {
  /** `RateLimit-Policy`. */
  policy: string;
  /** `RateLimit-Limit`. */
  limit: string;
}

/**
 * The rate-limit field values that are the same on every response of `policy`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(rateLimitConstants({ limit: 60, windowMs: 60_000 }), {
 *   policy: '"default";q=60;w=60',
 *   limit: "60",
 * });
 * ```
 */
export function rateLimitConstants(policy: RateLimitPolicy): RateLimitConstants {
  return { policy: policyHeader(policy), limit: String(policy.limit) };
}

/**
 * The `RateLimit` field's value for `remaining` requests left within an effective window of
 * `reset` seconds (draft-ietf-httpapi-ratelimit-headers-11: `r` the remaining quota, `t` the
 * effective window): the one policy, named `default`. The only place the service writes the
 * parameters' names, so that a draft renaming them changes this function alone (lib/limit/README.md,
 * "The draft's names").
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(rateLimitValue("59", "60"), '"default";r=59;t=60');
 * ```
 */
export function rateLimitValue(remaining: string, reset: string): string {
  return `"default";r=${remaining};t=${reset}`;
}

/**
 * The five rate-limit fields of `decision` (and `Retry-After` when it was refused), in the order they
 * are sent.
 */
export function rateLimitFields(
  decision: Decision,
  constants: RateLimitConstants,
): Array<readonly [string, string]> {
  const flat = appendRateLimitFields([], decision, constants);
  const fields: Array<readonly [string, string]> = [];
  for (let i = 0; i < flat.length; i += 2) fields.push([flat[i]!, flat[i + 1]!]);
  return fields;
}

/**
 * Appends the rate-limit fields of `decision` to `into` as name, value, name, value... (the form
 * `node:http`'s `writeHead` takes): the one place their names, order and values are written, for
 * {@linkcode rateLimitFields} and for answers sent without a `Response` (`respond/wire.ts`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const constants = { policy: '"default";q=60;w=60', limit: "60" };
 * const refused = { allowed: false, remaining: 0, resetSeconds: 4 };
 * assert.deepEqual(appendRateLimitFields(["vary", "Accept"], refused, constants).slice(-4), [
 *   "ratelimit-reset", "4", "retry-after", "4",
 * ]);
 * ```
 */
export function appendRateLimitFields(
  into: string[],
  decision: Decision,
  constants: RateLimitConstants,
): string[] {
  const remaining = String(decision.remaining);
  const reset = String(decision.resetSeconds);
  into.push(
    "ratelimit-policy",
    constants.policy,
    "ratelimit",
    rateLimitValue(remaining, reset),
    "ratelimit-limit",
    constants.limit,
    "ratelimit-remaining",
    remaining,
    "ratelimit-reset",
    reset,
  );
  if (!decision.allowed) into.push("retry-after", reset);
  return into;
}

/**
 * The decision on a CORS preflight, from the store's `peek` (a preflight is the browser asking
 * permission, not the caller's request: looked at, never counted). It is never reported as a
 * refusal, so that its answer carries no `Retry-After` whatever the path.
 *
 * @param peeked what `store.peek(key, now)` answered
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const spent = { allowed: false, remaining: 0, resetSeconds: 12 };
 * assert.deepEqual(preflightDecision(spent), { allowed: true, remaining: 0, resetSeconds: 12 });
 * assert.deepEqual(await preflightDecision(Promise.resolve(spent)), { ...spent, allowed: true });
 * ```
 */
export function preflightDecision(
  peeked: Decision | Promise<Decision>,
): Decision | Promise<Decision> {
  return pending(peeked) ? Promise.resolve(peeked).then(granted) : granted(peeked);
}

/**
 * Whether a store's answer is still to come: a promise, or any other thenable. A Durable Object's
 * RPC result on Workers is a thenable that is not `instanceof Promise`; taken for a decision, it
 * made every request answer 500. A decision is a plain object without `then`. Give a thenable to
 * `Promise.resolve` before chaining it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const decision = { allowed: true, remaining: 59, resetSeconds: 60 };
 * assert.equal(pending(decision), false);
 * assert.equal(pending(Promise.resolve(decision)), true);
 * const thenable: PromiseLike<typeof decision> = {
 *   then: (resolve) => Promise.resolve(resolve?.(decision)) as never,
 * };
 * assert.equal(pending(thenable), true);
 * assert.deepEqual(await Promise.resolve(thenable), decision);
 * ```
 */
export function pending<T extends object>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return value instanceof Promise || typeof (value as { then?: unknown }).then === "function";
}

function granted(decision: Decision): Decision {
  return decision.allowed ? decision : { ...decision, allowed: true };
}

/**
 * The decision a would-be refusal is served with (an exempt caller's, or any under
 * `RATE_LIMIT_MODE=report`: `lib/limit/caller/caller_controls.ts`): admitted, the fields as the store
 * counted them (`r=0`, `t` its effective window), and so no `Retry-After`. Nothing more is counted:
 * the store did not count the refused request, as it never does.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const refused = { allowed: false, remaining: 0, resetSeconds: 12 };
 * assert.deepEqual(servedRefusal(refused), { allowed: true, remaining: 0, resetSeconds: 12 });
 * ```
 */
export function servedRefusal(decision: Decision): Decision {
  return { allowed: true, remaining: 0, resetSeconds: Math.max(1, decision.resetSeconds) };
}

/**
 * What a response reports when no decision was made (a failure before the limiter answered): the
 * policy with nothing known to be left, so that clients slow down rather than speed up. Not a
 * refusal, so no `Retry-After`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(undecided({ limit: 60, windowMs: 60_000 }), {
 *   allowed: true,
 *   remaining: 0,
 *   resetSeconds: 60,
 * });
 * ```
 */
export function undecided(policy: RateLimitPolicy): Decision {
  return { allowed: true, remaining: 0, resetSeconds: Math.round(policy.windowMs / 1000) };
}
