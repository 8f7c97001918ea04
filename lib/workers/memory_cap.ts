/**
 * How many callers the memory store may hold in one Worker isolate (`RATE_LIMIT_STORE=memory` on
 * Workers): an isolate has 128 MB, and the Deno default of 500,000 callers at a limit of 60 would
 * take about 500 MB (the memory formula of lib/limit/README.md). The store gets
 * {@linkcode WORKERS_STORE_BUDGET} of it, the rest being the Worker's own (measured on workerd:
 * lib/limit/README.md, "Durable Objects on Workers").
 *
 * @module
 */

/** The bytes of an isolate the memory store may fill (48 MiB of 128 MB). */
export const WORKERS_STORE_BUDGET = 48 * 1024 * 1024;

/** The most callers the Deno service holds by default; Workers never hold more. */
const DEFAULT_MAX_CALLERS = 500_000;

/**
 * The pooled ring of a caller with `r` requests in its window, in float64 slots: none for one
 * request, else the power of two at or above `r`, at least 4 and at most 256 (`log_pool.ts`).
 */
function ringOf(r: number): number {
  if (r <= 1) return 0;
  return Math.min(256, Math.max(4, 2 ** Math.ceil(Math.log2(r))));
}

/**
 * The most bytes one caller costs at `limit` (every caller using its whole limit): the memory
 * formula's `34 + 8 × (2 × ring − 4)`, plus 16 B of the index (a slot per half caller, rounded up
 * to a power of two); above 256 a log leaves the pool for the heap, at most 16 B a request.
 */
export function bytesPerCaller(limit: number): number {
  const ring = ringOf(limit);
  const pooled = ring === 0 ? 0 : 8 * (2 * ring - 4);
  const heap = limit > 256 ? 16 * limit : 0;
  return 34 + pooled + heap + 16;
}

/**
 * The memory store's caller cap on Workers at `limit`: what {@linkcode WORKERS_STORE_BUDGET}
 * holds, at most 500,000.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(workersMaxCallers(60), 48_302);
 * assert.equal(workersMaxCallers(1), 500_000);
 * ```
 */
export function workersMaxCallers(limit: number): number {
  return Math.max(
    1,
    Math.min(DEFAULT_MAX_CALLERS, Math.floor(WORKERS_STORE_BUDGET / bytesPerCaller(limit))),
  );
}
