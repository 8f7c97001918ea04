/**
 * `once`: a value built on first use and kept, for what need not be built before it is needed (the
 * paths' representations and answers, the pages; lib/README.md, "Cold start").
 *
 * A build that failed is not kept: one that threw throws again at the next call, which builds again,
 * and a promise that rejected is forgotten once it has, so the next call builds again (a dynamic
 * import or a render that failed once, for a reason that passed, must not fail every request after
 * it for the life of the process). Callers that share the promise while it is pending all see its
 * rejection.
 *
 * @module
 */

/**
 * A function that computes `build()` on its first call and returns that value ever after; a build
 * that threw, or returned a promise that rejected, is built again at the next call.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * let built = 0;
 * const answer = once(() => ++built * 42);
 * assert.equal(answer(), 42);
 * assert.equal(answer(), 42);
 * assert.equal(built, 1);
 * // A promise that rejected is not kept: the next call builds again.
 * let tries = 0;
 * const loaded = once(() => ++tries === 1 ? Promise.reject(new Error("busy")) : Promise.resolve(7));
 * await assert.rejects(loaded(), /busy/);
 * assert.equal(await loaded(), 7);
 * assert.equal(tries, 2);
 * ```
 */
export function once<T>(build: () => T): () => T {
  let built: { value: T } | undefined;
  return () => {
    if (built !== undefined) return built.value;
    const kept = { value: build() };
    built = kept;
    const value = kept.value;
    if (value instanceof Promise) {
      // Forgotten once it rejects (unless a later build replaced it already); its callers see the
      // rejection through the promise they hold.
      value.catch(() => {
        if (built === kept) built = undefined;
      });
    }
    return value;
  };
}
