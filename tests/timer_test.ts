/**
 * Tests of the one-shot timer that loads nothing (`lib/timer.ts`).
 *
 * @module
 */

import assert from "node:assert/strict";
import { later } from "../lib/timer.ts";
import { lazyGlobalsReadBy } from "./_lazy_globals.ts";

Deno.test("later() calls back once after the delay", async () => {
  const started = performance.now();
  let calls = 0;
  await new Promise<void>((resolve) =>
    later(20, () => {
      calls++;
      resolve();
    })
  );
  assert.ok(performance.now() - started >= 19, "called back early");
  await new Promise<void>((resolve) => later(30, resolve));
  assert.equal(calls, 1);
});

Deno.test("later()'s cancel stops the call", async () => {
  let called = false;
  const cancel = later(1, () => called = true);
  cancel();
  await new Promise<void>((resolve) => later(20, resolve));
  assert.equal(called, false);
});

Deno.test("later() reads no lazily loaded global (Node's timers): scheduling costs a cold start nothing", () => {
  let cancel = () => {};
  const read = lazyGlobalsReadBy(() => cancel = later(10, () => {}));
  cancel();
  assert.deepEqual(read, []);
});
