/**
 * A one-shot timer that loads nothing: for what the service schedules before its first response.
 *
 * Deno's global `setTimeout` and `setInterval` are Node's (`node:timers`), which the runtime loads
 * the first time either is read: Node's internal errors, async hooks and timers modules, about 5 ms
 * of a cold start (lib/README.md, "Cold start"). `AbortSignal.timeout` runs on the runtime's own
 * timer, so the warm-up's delay, the memory store's first sweep and the access log's first flush
 * wait with it, and the first response does not pay for Node's timers.
 *
 * @module
 */

/**
 * Calls `callback` once, `ms` from now, unless the returned function is called first. Like
 * `setTimeout`, the pending call keeps the process alive; cancelling releases it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const fired = await new Promise<string>((resolve) => later(1, () => resolve("fired")));
 * assert.equal(fired, "fired");
 * let called = false;
 * const cancel = later(1, () => called = true);
 * cancel();
 * await new Promise<void>((resolve) => later(5, resolve));
 * assert.equal(called, false);
 * ```
 */
export function later(ms: number, callback: () => void): () => void {
  const signal = AbortSignal.timeout(Math.max(0, Math.ceil(ms)));
  const listener = () => callback();
  signal.addEventListener("abort", listener, { once: true });
  return () => signal.removeEventListener("abort", listener);
}

/**
 * Lets `timer` (a `setTimeout` or `setInterval` handle) not keep the process alive, where the
 * runtime's timers can (Deno's are Node's, with `unref()`); elsewhere (Workers, whose handles are
 * numbers and whose isolates the platform ends) nothing to do. For a background loop that must never
 * hold a process, or a test, open; it names no runtime API, so the stores that use it run anywhere.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const timer = setInterval(() => {}, 60_000) as unknown as { hasRef(): boolean };
 * assert.equal(timer.hasRef(), true);
 * unref(timer);
 * assert.equal(timer.hasRef(), false);
 * unref(7); // a number, as Workers give: nothing to do
 * clearInterval(timer as unknown as number);
 * ```
 */
export function unref(timer: unknown): void {
  if (typeof timer === "object" && timer !== null && "unref" in timer) {
    (timer as { unref: () => void }).unref();
  }
}
