/**
 * Tests of the entry picker of `deno task start` (lib/build/entry.ts) on real files in a temporary
 * folder: the bundle when it was built from the sources as they are (their digest), built when
 * stale, the sources with a warning when it cannot be built.
 *
 * @module
 */

import assert from "node:assert/strict";
import { BUNDLE, bundleIsFresh, pickEntry, stampBundle } from "../../lib/build/entry.ts";

/** A checkout with main.ts and lib/server/a.ts, and a bundle stamped from them when `built`. */
async function checkout(built: boolean): Promise<string> {
  const root = Deno.makeTempDirSync();
  Deno.mkdirSync(`${root}/lib/server`, { recursive: true });
  Deno.writeTextFileSync(`${root}/main.ts`, "import './lib/server/a.ts';\n");
  Deno.writeTextFileSync(`${root}/lib/server/a.ts`, "export const a = 1;\n");
  if (built) await writeBundle(root);
  return root;
}

/** What `deno task build` does: the bundle, then its stamp. */
async function writeBundle(root: string): Promise<void> {
  Deno.mkdirSync(`${root}/dist/app`, { recursive: true });
  Deno.writeTextFileSync(`${root}/${BUNDLE}`, "");
  await stampBundle(root);
}

Deno.test("pickEntry() runs a bundle built from the sources as they are, without building", async () => {
  let builds = 0;
  const build = () => (builds++, Promise.resolve(undefined));
  const root = await checkout(true);
  assert.deepEqual(await pickEntry(root, { build }), { entry: BUNDLE });
  // A newer time on an unchanged source (a checkout, a touch) needs no rebuild.
  Deno.utimeSync(`${root}/lib/server/a.ts`, 4_000_000_000, 4_000_000_000);
  assert.deepEqual(await pickEntry(root, { build }), { entry: BUNDLE });
  assert.equal(builds, 0);
});

Deno.test("pickEntry() builds a bundle that is missing or stale, then runs it", async () => {
  const stale = await checkout(true);
  Deno.writeTextFileSync(`${stale}/lib/server/a.ts`, "export const a = 2;\n");
  for (const root of [await checkout(false), stale]) {
    let builds = 0;
    const build = async () => (builds++, await writeBundle(root), undefined);
    assert.deepEqual(await pickEntry(root, { build }), { entry: BUNDLE });
    assert.equal(builds, 1);
  }
});

Deno.test("a lib/ file restored with an older time, other content, makes the bundle stale (rsync -a, tar, cp -p)", async () => {
  const root = await checkout(true);
  Deno.utimeSync(`${root}/${BUNDLE}`, 2_000_000_000, 2_000_000_000);
  Deno.writeTextFileSync(`${root}/lib/server/a.ts`, "export const a = 'reviewed? no';\n");
  Deno.utimeSync(`${root}/lib/server/a.ts`, 1, 1);
  assert.equal(await bundleIsFresh(root), false);
  // A file added anywhere under lib/ too, and the lock.
  const again = await checkout(true);
  Deno.mkdirSync(`${again}/lib/deep/er`, { recursive: true });
  Deno.writeTextFileSync(`${again}/lib/deep/er/b.ts`, "");
  Deno.utimeSync(`${again}/lib/deep/er/b.ts`, 1, 1);
  assert.equal(await bundleIsFresh(again), false);
  const locked = await checkout(true);
  Deno.writeTextFileSync(`${locked}/deno.lock`, "{}");
  assert.equal(await bundleIsFresh(locked), false);
});

Deno.test("pickEntry() runs main.ts with one warning when the stale bundle cannot be built", async () => {
  const root = await checkout(true);
  Deno.writeTextFileSync(`${root}/main.ts`, "// edited\n");
  const picked = await pickEntry(root, {
    build: () => Promise.resolve("error: Permission denied (os error 13)"),
  });
  assert.equal(picked.entry, "main.ts");
  assert.match(
    picked.warning!,
    /not built from the sources as they are.*Permission denied.*deno task build/,
  );
  assert.ok(!picked.warning!.includes("\n"));
  // A build that succeeds but leaves the bundle stale is no bundle to run either.
  const stale = await pickEntry(root, { build: () => Promise.resolve(undefined) });
  assert.equal(stale.entry, "main.ts");
});
