/**
 * The static files and token ranks as Node reads them from the disk, as Deno's entry does
 * (`lib/server/static_files.ts`, `token_ranks.ts`): `static/` beside the code, and the indexed ranks
 * `deno task build:tokens` (or `npm ci`) writes to `dist/tokens/o200k_ranks.bin`, of which only what
 * a lookup touches is read. Where that file was never built (a machine with only Node), the counter packs the
 * ranks of `gpt-tokenizer` itself (`lib/pages/tokens.ts`).
 *
 * @module
 */

import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { STATIC_DIR, type StaticFiles, UnreadableFolderError } from "../pages/content.ts";
import type { FormReader } from "../pages/tokens/ranks.ts";
import { errorCodeOf } from "../text/error_message.ts";

/**
 * Reads a file's text from the disk; a read the file system denied (or Node's permission model did
 * not grant) throws {@linkcode UnreadableFolderError}, anything else as Node threw it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { STATIC_DIR } from "../pages/content.ts";
 * assert.match(readStaticFile(`${STATIC_DIR}/robots.txt`), /User-agent/);
 * ```
 */
export function readStaticFile(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    const code = errorCodeOf(error);
    if (code === "ERR_ACCESS_DENIED") {
      throw new UnreadableFolderError("not-granted", { cause: error });
    }
    if (code === "EACCES" || code === "EPERM") {
      throw new UnreadableFolderError("denied", { cause: error });
    }
    throw error;
  }
}

/** The indexed ranks the build writes, which Deno's entry reads too (`lib/server/token_ranks.ts`). */
const RANKS_FILE = new URL("../../dist/tokens/o200k_ranks.bin", import.meta.url);
/** The build's module of the ranks (`lib/pages/tokens.ts` imports it when this says it may). */
const RANKS_MODULE = new URL("../../dist/tokens/o200k_ranks.js", import.meta.url);

/**
 * The ranks the build wrote (`BuiltRanks`, `lib/pages/tokens.ts`): a reader of the file where it is,
 * else whether the build's module is there to import.
 */
export function builtRanks(): Promise<FormReader | boolean> {
  return Promise.resolve(fileReader(fileURLToPath(RANKS_FILE)) ?? existsSync(RANKS_MODULE));
}

/**
 * A reader of the file at `path` that reads only what it is asked for, or undefined where it cannot
 * be opened.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(fileReader("/nonexistent/o200k_ranks.bin"), undefined);
 * ```
 */
export function fileReader(path: string): FormReader | undefined {
  let fd: number;
  try {
    fd = openSync(path, "r");
    if (!fstatSync(fd).isFile()) {
      closeSync(fd);
      return undefined;
    }
  } catch {
    return undefined;
  }
  return {
    read(at, length) {
      const bytes = new Uint8Array(length);
      let done = 0;
      while (done < length) {
        const count = readSync(fd, bytes, done, length - done, at + done);
        if (count === 0) return bytes.subarray(0, done);
        done += count;
      }
      return bytes;
    },
    close: () => closeSync(fd),
  };
}

/** The service's `static/` folder on the disk, for `loadContent`, and the build's token ranks. */
export const NODE_STATIC_FILES: StaticFiles = {
  dir: STATIC_DIR,
  read: readStaticFile,
  tokenRanks: builtRanks,
};
