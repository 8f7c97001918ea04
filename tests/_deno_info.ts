/**
 * The module graph of main.ts as Deno itself resolves it (`deno info --json main.ts`), for the tests
 * that check what main.ts imports: the architecture test and the cold-start imports test.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";

/** The project's root folder, where main.ts is. */
export const ROOT = join(import.meta.dirname!, "..");

/** One import of a module, as `deno info --json` lists it. */
export interface InfoDependency {
  /** Whether it is a dynamic `import()`. */
  isDynamic?: boolean;
  /** The module the code imports. */
  code?: { specifier: string };
  /** The module of an `import type`. */
  type?: { specifier: string };
}

/** The parts of `deno info --json`'s output these tests read. */
export interface DenoInfo {
  /** The entry points (main.ts). */
  roots: string[];
  /** Every module reached, with its imports. */
  modules: Array<{ specifier: string; dependencies?: InfoDependency[] }>;
}

/**
 * Runs `deno info --json <entry>` (main.ts unless told) in the project's root; with `noLock`, it
 * neither reads nor writes a lock file (a build step importing a test-time package would add it to
 * the root lock, and written into tests/deno.lock a graph of a few modules drops what it lacks).
 */
export async function denoInfo(entry = "main.ts", noLock = false): Promise<DenoInfo> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", ...(noLock ? ["--no-lock"] : []), entry],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
  return JSON.parse(new TextDecoder().decode(output.stdout)) as DenoInfo;
}
