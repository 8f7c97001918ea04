/**
 * Helpers shared by the rate-limit stores that keep their log outside the process (Deno KV, Redis).
 *
 * @module
 */

import { type Decision, type RateLimitPolicy, resetSecondsOf } from "./memory.ts";

/**
 * What a look-up without counting reports, given the caller's live count and oldest timestamp: the
 * same answer as `MemoryStore.peek`.
 */
export function peekDecision(
  count: number,
  oldest: number | undefined,
  now: number,
  policy: RateLimitPolicy,
): Decision {
  if (count === 0 || oldest === undefined) {
    return { allowed: true, remaining: policy.limit, resetSeconds: 0 };
  }
  return {
    allowed: count < policy.limit,
    remaining: Math.max(0, policy.limit - count),
    resetSeconds: resetSecondsOf(oldest, now, policy.windowMs),
  };
}
