/**
 * Tests of the entry picker of `deno task start` (lib/server/entry.ts) on real files in a temporary
 * folder, their modification times set: the bundle when it is fresh, built when stale, the sources
 * with a warning when it cannot be built.
 *
 * @module
 */

import assert from "node:assert/strict";
import { BUNDLE, bundleIsFresh, pickEntry } from "../../lib/server/entry.ts";

/** A checkout with main.ts and lib/a.ts at `sourceSecond`, and the bundle at `bundleSecond`. */
function checkout(sourceSecond: number, bundleSecond?: number): string {
  const root = Deno.makeTempDirSync();
  Deno.mkdirSync(`${root}/lib/server`, { recursive: true });
  for (const path of ["main.ts", "lib/server/a.ts"]) {
    Deno.writeTextFileSync(`${root}/${path}`, "");
    Deno.utimeSync(`${root}/${path}`, sourceSecond, sourceSecond);
  }
  if (bundleSecond !== undefined) writeBundle(root, bundleSecond);
  return root;
}

function writeBundle(root: string, second: number): void {
  Deno.mkdirSync(`${root}/dist/app`, { recursive: true });
  Deno.writeTextFileSync(`${root}/${BUNDLE}`, "");
  Deno.utimeSync(`${root}/${BUNDLE}`, second, second);
}

Deno.test("pickEntry() runs a bundle at least as new as every source, without building", async () => {
  let builds = 0;
  const build = () => (builds++, Promise.resolve(undefined));
  assert.deepEqual(await pickEntry(checkout(100, 100), { build }), { entry: BUNDLE });
  assert.deepEqual(await pickEntry(checkout(100, 200), { build }), { entry: BUNDLE });
  assert.equal(builds, 0);
});

Deno.test("pickEntry() builds a bundle that is missing or older than a source, then runs it", async () => {
  for (const root of [checkout(200), checkout(200, 100)]) {
    const build = () => (writeBundle(root, 300), Promise.resolve(undefined));
    assert.deepEqual(await pickEntry(root, { build }), { entry: BUNDLE });
  }
});

Deno.test("pickEntry() runs main.ts with one warning when the stale bundle cannot be built", async () => {
  const root = checkout(200, 100);
  const picked = await pickEntry(root, {
    build: () => Promise.resolve("error: Permission denied (os error 13)"),
  });
  assert.equal(picked.entry, "main.ts");
  assert.match(picked.warning!, /older than the sources.*Permission denied.*deno task build/);
  assert.ok(!picked.warning!.includes("\n"));
  // A build that succeeds but leaves the bundle stale is no bundle to run either.
  const stale = await pickEntry(root, { build: () => Promise.resolve(undefined) });
  assert.equal(stale.entry, "main.ts");
});

Deno.test("bundleIsFresh() compares with every file under lib/, however deep", () => {
  const root = checkout(100, 200);
  assert.equal(bundleIsFresh(root), true);
  Deno.utimeSync(`${root}/lib/server/a.ts`, 300, 300);
  assert.equal(bundleIsFresh(root), false);
});
