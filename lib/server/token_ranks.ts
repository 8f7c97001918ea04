/**
 * The token ranks as Deno finds them (`static_files.ts` gives them to `loadContent`): the indexed
 * ranks (`lib/pages/tokens/ranks.ts`) that `deno task build:tokens` writes beside this module and
 * the bundle (`o200k_ranks.bin`), of which the counter reads only what its lookups touch: the
 * counts the build made cover every chunk of the shipped bodies, and the ranks are looked up for
 * the few a configuration brings (a JavaScript module carrying the same bytes costs about 10 MiB
 * more resident memory to load, its text held and parsed, and reading the file whole 4.4 MB;
 * tests/bench/README.md, "Token counts and memory").
 *
 * Only a file the process may already read is opened: asking for a permission would prompt on a
 * terminal (a source checkout run with `--allow-read=./static`, issue 41).
 *
 * @module
 */

import type { FormReader } from "../pages/tokens/ranks.ts";

/**
 * The file, beside this module: `deno task build:tokens` writes it here for the sources (and the
 * compiled binary, which embeds it: `--include`) and in `dist/app/` for the bundle, whose chunks
 * this module is bundled into.
 */
const PLACE = "./o200k_ranks.bin";

/**
 * The module the build writes for every bundler (`dist/tokens/o200k_ranks.js`), as
 * `lib/pages/tokens.ts` imports it: this module is as deep in the tree as that one, in the sources
 * and in the bundle alike.
 */
const MODULE_PLACE = "../../dist/tokens/o200k_ranks.js";

/**
 * The ranks the build wrote, as `BuiltRanks` (`lib/pages/tokens.ts`): a reader of the file where
 * this process may read it, else whether it may import the build's module without asking.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const found = await builtRanks();
 * if (typeof found === "object") {
 *   assert.equal(found.read(0, 4).length, 4);
 *   found.close();
 * }
 * ```
 */
export function builtRanks(): Promise<FormReader | boolean> {
  const url = new URL(PLACE, import.meta.url);
  return Promise.resolve(
    (mayRead(url) ? fileReader(url) : undefined) ??
      mayRead(new URL(MODULE_PLACE, import.meta.url)),
  );
}

/**
 * A reader of the file at `url`, which reads only what it is asked for (the counter's lookups: a
 * few hundred bytes a chunk), or undefined where it is missing.
 */
export function fileReader(url: URL): FormReader | undefined {
  let file: Deno.FsFile;
  try {
    file = Deno.openSync(url);
  } catch {
    return undefined;
  }
  return {
    read(at, length) {
      const bytes = new Uint8Array(length);
      file.seekSync(at, Deno.SeekMode.Start);
      for (let done = 0; done < length;) {
        const count = file.readSync(bytes.subarray(done));
        if (count === null) return bytes.subarray(0, done);
        done += count;
      }
      return bytes;
    },
    close: () => file.close(),
  };
}

/**
 * Whether this process may read `url` without asking (importing a module it may not read would
 * prompt on a terminal). A compiled binary reads its own files and modules without a grant.
 */
function mayRead(url: URL): boolean {
  return Deno.build.standalone ||
    Deno.permissions.querySync({ name: "read", path: url }).state === "granted";
}
