/**
 * `once`: a value built on first use and kept, for what need not be built before it is needed (the
 * paths' representations and answers, the pages; lib/README.md, "Cold start").
 *
 * @module
 */

/**
 * A function that computes `build()` on its first call and returns that value ever after.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * let built = 0;
 * const answer = once(() => ++built * 42);
 * assert.equal(answer(), 42);
 * assert.equal(answer(), 42);
 * assert.equal(built, 1);
 * ```
 */
export function once<T>(build: () => T): () => T {
  let built: { value: T } | undefined;
  return () => (built ??= { value: build() }).value;
}
