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

/** The longest delay `setTimeout` keeps (a longer one fires at once): a longer bound is none. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** What a timer's expiry decides: wait `wait` ms more, or settle the race with `answer`. */
export type Expiry<L> = { readonly wait: number } | { readonly answer: L };

/**
 * Races `result` against a timer of `ms`, the one race of a call against its bound. When the timer
 * fires first, `expire` decides: wait more (`{ wait }`), answer (`{ answer }`), or throw (the race
 * rejects with it). The timer is cleared once the race settles, and a late rejection of `result` is
 * observed by the race, so it never becomes unhandled. A bound of {@linkcode MAX_TIMER_MS} or more is
 * none: `result` alone.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const never = new Promise<string>(() => {});
 * assert.equal(await raceTimer(never, 1, () => ({ answer: "late" })), "late");
 * assert.equal(await raceTimer(Promise.resolve("in time"), 1_000, () => ({ answer: "late" })), "in time");
 * await assert.rejects(raceTimer(never, 1, () => { throw new Error("timed out"); }), /timed out/);
 * ```
 */
export function raceTimer<T, L>(
  result: Promise<T>,
  ms: number,
  expire: () => Expiry<L>,
): Promise<T | L> {
  if (ms >= MAX_TIMER_MS) return result;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expiry = new Promise<L>((resolve, reject) => {
    const fire = () => {
      try {
        const decided = expire();
        if ("wait" in decided) timer = setTimeout(fire, decided.wait);
        else resolve(decided.answer);
      } catch (error) {
        reject(error);
      }
    };
    timer = setTimeout(fire, ms);
  });
  return Promise.race([result, expiry]).finally(() => clearTimeout(timer));
}
