/**
 * The token ranks as Deno finds them (`static_files.ts` gives them to `loadContent`): the indexed
 * ranks (`lib/pages/tokens/ranks.ts`) that `deno task build:tokens` writes to
 * `dist/tokens/o200k_ranks.bin`, where Node's entry reads them too, of which the counter reads only
 * what its lookups touch: the
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
 * The file `deno task build:tokens` writes, as this module finds it: two folders up, then
 * `dist/tokens/`, from the sources (`lib/server/`) and from the bundle's chunks (`dist/app/`) alike;
 * the compiled binary embeds it there (`--include`).
 */
const PLACE = "../../dist/tokens/o200k_ranks.bin";

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
export async function builtRanks(): Promise<FormReader | boolean> {
  const ahead = prepared;
  prepared = undefined;
  const url = new URL(PLACE, import.meta.url);
  return (ahead ? await ahead : undefined) ?? (mayRead(url) ? fileReader(url) : undefined) ??
    mayRead(new URL(MODULE_PLACE, import.meta.url));
}

/** The file {@linkcode prepareBuiltRanks} opened, for the next {@linkcode builtRanks} to take. */
let prepared: Promise<FormReader | undefined> | undefined;

/** Bytes read ahead from the file's start (its header and split pattern, about 500 bytes). */
const HEAD_BYTES = 4096;
/** Bytes read ahead from the file's end (the known counts: 13 KB for the shipped `static/`). */
const TAIL_BYTES = 65_536;

/**
 * Opens the file and reads its header, pattern and known counts in the background (Deno's file
 * operations run off the main thread), so that the first count finds them read: the service calls
 * it as it starts (`configure.ts`), and the next {@linkcode builtRanks} takes the file. A failure
 * is left to that count, which opens the file itself.
 */
export function prepareBuiltRanks(): void {
  if (prepared !== undefined) return;
  try {
    const url = new URL(PLACE, import.meta.url);
    if (mayRead(url)) prepared = openAhead(url).catch(() => undefined);
  } catch {
    // No permission to ask about (a module that is no file): the first count finds its ranks.
  }
}

/**
 * A reader of the file at `url`, opened with its first and last bytes read ahead (the header,
 * pattern and known counts) and served from memory.
 */
export async function openAhead(url: URL): Promise<FormReader> {
  const file = await Deno.open(url);
  try {
    const { size } = await file.stat();
    const head = await readAt(file, 0, Math.min(size, HEAD_BYTES));
    const tailAt = Math.max(0, size - TAIL_BYTES);
    const tail = await readAt(file, tailAt, size - tailAt);
    return reader(file, [{ at: 0, bytes: head }, { at: tailAt, bytes: tail }]);
  } catch (error) {
    file.close();
    throw error;
  }
}

/** `length` bytes of `file` from `at` (fewer at its end). */
async function readAt(file: Deno.FsFile, at: number, length: number): Promise<Uint8Array> {
  const bytes = new Uint8Array(length);
  await file.seek(at, Deno.SeekMode.Start);
  for (let done = 0; done < length;) {
    const count = await file.read(bytes.subarray(done));
    if (count === null) return bytes.subarray(0, done);
    done += count;
  }
  return bytes;
}

/**
 * A reader of the file at `url`, which reads only what it is asked for (the counter's lookups: a
 * few hundred bytes a chunk), or undefined where it is missing.
 */
export function fileReader(url: URL): FormReader | undefined {
  try {
    return reader(Deno.openSync(url), []);
  } catch {
    return undefined;
  }
}

/** A reader of `file`, which serves the ranges read ahead from memory. */
function reader(file: Deno.FsFile, ahead: Array<{ at: number; bytes: Uint8Array }>): FormReader {
  return {
    read(at, length) {
      for (const range of ahead) {
        if (at >= range.at && at + length <= range.at + range.bytes.length) {
          return range.bytes.slice(at - range.at, at - range.at + length);
        }
      }
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
