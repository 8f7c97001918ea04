/**
 * The static files as Deno reads them: from the disk, with the runtime's permission errors told
 * apart, so that `lib/pages/content.ts` names no runtime API (the Worker reads them from its bundle,
 * `lib/workers/`).
 *
 * @module
 */

import { STATIC_DIR, type StaticFiles, UnreadableFolderError } from "../pages/content.ts";
import { builtRanks } from "./token_ranks.ts";

/**
 * Reads a file's text from the disk; a read the runtime did not grant or the file system denied
 * throws {@linkcode UnreadableFolderError}, anything else as Deno threw it.
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
    return Deno.readTextFileSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotCapable) {
      throw new UnreadableFolderError("not-granted", { cause: error });
    }
    if (error instanceof Deno.errors.PermissionDenied) {
      throw new UnreadableFolderError("denied", { cause: error });
    }
    throw error;
  }
}

/**
 * The service's `static/` folder on the disk, for `loadContent`, and the token ranks the build wrote
 * (`token_ranks.ts`: read in the background while the service starts, `configure.ts`).
 */
export const DISK_STATIC_FILES: StaticFiles = {
  dir: STATIC_DIR,
  read: readStaticFile,
  tokenRanks: builtRanks,
};
