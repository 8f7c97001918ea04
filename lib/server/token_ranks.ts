/**
 * The token ranks as Deno finds them (`static_files.ts` gives them to `loadContent`): the indexed
 * ranks (`lib/pages/tokens/ranks.ts`) that `deno task build:tokens` writes beside this module and
 * the bundle (`o200k_ranks.bin`), read into one buffer and used as they are, with nothing
 * parsed (a JavaScript module carrying the same bytes costs about 10 MiB more resident memory to
 * load, its text held and parsed; tests/bench/README.md, "Token counts and memory").
 *
 * Only a file the process may already read is opened: asking for a permission would prompt on a
 * terminal (a source checkout run with `--allow-read=./static`, issue 41).
 *
 * @module
 */

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

/** The bytes of `url`, or undefined when it cannot be read without asking or is missing. */
function readIfAllowed(url: URL): Uint8Array | undefined {
  if (!mayRead(url)) return undefined;
  let file: Deno.FsFile;
  try {
    file = Deno.openSync(url);
  } catch {
    return undefined;
  }
  try {
    const bytes = new Uint8Array(file.statSync().size);
    let read = 0;
    while (read < bytes.length) {
      const count = file.readSync(bytes.subarray(read));
      if (count === null) return undefined;
      read += count;
    }
    return bytes;
  } finally {
    file.close();
  }
}

/**
 * The indexed ranks the build wrote, or undefined where there are none this process may read.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const bytes = readBuiltRanks();
 * assert.ok(bytes === undefined || bytes.length > 1_000_000);
 * ```
 */
export function readBuiltRanks(): Uint8Array | undefined {
  return readIfAllowed(new URL(PLACE, import.meta.url));
}

/**
 * The ranks the build wrote, as `BuiltRanks` (`lib/pages/tokens.ts`): their bytes where this process may read the
 * file, else whether it may import the build's module without asking.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const found = await builtRanks();
 * assert.ok(typeof found === "boolean" || found.length > 1_000_000);
 * ```
 */
export function builtRanks(): Promise<Uint8Array | boolean> {
  return Promise.resolve(readBuiltRanks() ?? mayRead(new URL(MODULE_PLACE, import.meta.url)));
}

/**
 * Whether this process may read `url` without asking (importing a module it may not read would
 * prompt on a terminal). A compiled binary reads its own files and modules without a grant.
 */
function mayRead(url: URL): boolean {
  return Deno.build.standalone ||
    Deno.permissions.querySync({ name: "read", path: url }).state === "granted";
}
