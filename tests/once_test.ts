/**
 * Tests of `once` (`lib/once.ts`): a value is built once and kept, and a build that failed is not
 * kept, so a failure that passed (a dynamic import, a render) does not fail every call after it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { once } from "../lib/once.ts";

Deno.test("once builds a value on its first call and keeps it", () => {
  let built = 0;
  const value = once(() => ({ n: ++built }));
  assert.equal(value(), value());
  assert.equal(built, 1);
});

Deno.test("once builds again after a build that threw", () => {
  let tries = 0;
  const value = once(() => {
    if (++tries === 1) throw new Error("first build fails");
    return tries;
  });
  assert.throws(value, /first build fails/);
  assert.equal(value(), 2);
  assert.equal(value(), 2);
});

Deno.test("once forgets a promise that rejected, and keeps one that resolved", async () => {
  let tries = 0;
  const value = once(async () => {
    await Promise.resolve(); // as a dynamic import: the failure comes later, as a rejection
    if (++tries === 1) throw new Error("the import failed once");
    return tries;
  });
  const first = value();
  // Callers sharing the pending promise all see its rejection.
  const shared = value();
  assert.equal(first, shared);
  await assert.rejects(first, /the import failed once/);
  assert.equal(await value(), 2);
  assert.equal(await value(), 2);
  assert.equal(tries, 2);
});
