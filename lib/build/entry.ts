/**
 * Picks the module `deno task start` runs, and prints its path on stdout: the bundle
 * (`dist/app/main.js`, the faster cold start) when it was built from the sources as they are, after
 * building it when it is missing or stale and the checkout can be written; otherwise `main.ts`, with
 * one warning line on stderr.
 *
 * A checkout the service may only read (a service account, a container's non-root user, a read-only
 * file system) still starts: from the bundle that `deno task build` wrote at install time, or from
 * the sources. Freshness is judged by content: `deno task build` writes the SHA-256 of its inputs
 * (`main.ts`, `deno.json`, `deno.lock`, every file under `lib/`) beside the bundle
 * (`lib/build/entry.ts --stamp`), and the bundle runs only when the inputs still have that digest.
 * Modification times would run a stale bundle after a `lib/` file is restored with an older time
 * (`rsync -a`, `tar`, `cp -p`): the service would not run what was reviewed.
 *
 * Run by the task as `deno run --allow-read=. --allow-run lib/build/entry.ts` from the project's
 * folder. What it prints are the task's last arguments before `--listen`: the bundle's path, or
 * `--allow-read=./lib main.ts` ({@linkcode startArguments}), since the sources import their lazy
 * modules from `lib/`, which the task does not grant the bundle (Deno merges repeated `--allow-read`
 * flags).
 *
 * @module
 */

import { messageOf } from "../text/error_message.ts";
import { sha256Hex } from "../text/sha256_hex.ts";

/** The bundle that `deno task build` writes, relative to the project's folder. */
export const BUNDLE = "dist/app/main.js";
/** The source entry point, run when the bundle is stale and cannot be built. */
const SOURCE = "main.ts";
/**
 * What the bundle is built from: files and folders to walk (every file under `lib/`), and the lock
 * that pins the npm packages it imports.
 */
const BUILD_INPUTS: readonly string[] = ["main.ts", "deno.json", "deno.lock", "lib"];

/** What {@linkcode pickEntry} decided: the module to run, and a warning when it is not the bundle. */
export interface Picked {
  /** `dist/app/main.js` or `main.ts`. */
  entry: string;
  /** One line for the operator when the sources are run instead of the bundle. */
  warning?: string;
}

/** Options of {@linkcode pickEntry}. */
export interface PickOptions {
  /** Builds the bundle; resolves with undefined on success, or the first line of the failure. */
  build: () => Promise<string | undefined>;
}

/** The digest of the build inputs the bundle was built from, written beside it by `deno task build`. */
const STAMP = "dist/app/inputs.sha256";

/** The files under `paths` (relative to `root`), walking folders, sorted: what is digested. */
function inputFiles(root: string, paths: readonly string[]): string[] {
  const files: string[] = [];
  const visit = (path: string) => {
    let info: Deno.FileInfo;
    try {
      info = Deno.statSync(`${root}/${path}`);
    } catch {
      return;
    }
    if (info.isDirectory) {
      for (const entry of Deno.readDirSync(`${root}/${path}`)) visit(`${path}/${entry.name}`);
    } else files.push(path);
  };
  for (const path of paths) visit(path);
  return files.sort();
}

/**
 * The SHA-256 (hex) of the build inputs under `root`: each file's path and bytes, in path order.
 * Content, not modification times: a `lib/` file restored with an older time (`rsync -a`, `tar`,
 * `cp -p`) changes it, and a `touch` does not.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const root = Deno.makeTempDirSync();
 * Deno.writeTextFileSync(`${root}/main.ts`, "a");
 * const before = await inputsDigest(root);
 * Deno.writeTextFileSync(`${root}/main.ts`, "b");
 * Deno.utimeSync(`${root}/main.ts`, 1, 1);
 * assert.notEqual(await inputsDigest(root), before);
 * ```
 */
export async function inputsDigest(root: string): Promise<string> {
  const encoder = new TextEncoder();
  const parts: Uint8Array[] = [];
  for (const path of inputFiles(root, BUILD_INPUTS)) {
    parts.push(
      encoder.encode(`${path}\u0000`),
      Deno.readFileSync(`${root}/${path}`),
      new Uint8Array(1),
    );
  }
  const bytes = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    bytes.set(part, offset);
    offset += part.length;
  }
  return await sha256Hex(bytes);
}

/** Writes {@linkcode STAMP}: the digest of the inputs the bundle in `root` was just built from. */
export async function stampBundle(root: string): Promise<void> {
  Deno.writeTextFileSync(`${root}/${STAMP}`, `${await inputsDigest(root)}\n`);
}

/** Whether `root`'s bundle exists and was built from the build inputs as they are now. */
export async function bundleIsFresh(root: string): Promise<boolean> {
  let stamp: string;
  try {
    Deno.statSync(`${root}/${BUNDLE}`);
    stamp = Deno.readTextFileSync(`${root}/${STAMP}`).trim();
  } catch {
    return false;
  }
  return stamp === await inputsDigest(root);
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Decides what `deno task start` runs in `root`: the fresh bundle, the bundle just built, or the
 * sources with a warning that names the reason and the fix.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const root = Deno.makeTempDirSync();
 * Deno.writeTextFileSync(`${root}/main.ts`, "");
 * const picked = await pickEntry(root, { build: () => Promise.resolve("error: Permission denied") });
 * assert.equal(picked.entry, "main.ts");
 * assert.match(picked.warning!, /Permission denied/);
 * ```
 */
export async function pickEntry(root: string, options: PickOptions): Promise<Picked> {
  if (await bundleIsFresh(root)) return { entry: BUNDLE };
  const failure = await options.build();
  if (failure === undefined && await bundleIsFresh(root)) return { entry: BUNDLE };
  const missing = exists(`${root}/${BUNDLE}`)
    ? "not built from the sources as they are"
    : "missing";
  return {
    entry: SOURCE,
    warning: `the bundle ${BUNDLE} is ${missing} and cannot be built here (${
      failure ?? "the build left it stale"
    }): starting from ${SOURCE}, a slower cold start; run "deno task build" as a user who may write the checkout to start from the bundle`,
  };
}

/**
 * What `deno task start` passes after its own flags for `picked`: the bundle's path, or read access
 * to `lib/` and the source entry point.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(startArguments({ entry: BUNDLE }), "dist/app/main.js");
 * assert.equal(startArguments({ entry: "main.ts" }), "--allow-read=./lib main.ts");
 * ```
 */
export function startArguments(picked: Picked): string {
  return picked.entry === SOURCE ? `--allow-read=./lib ${SOURCE}` : picked.entry;
}

/**
 * The line of a failed build's output that says why: its first `error` line, else its first line
 * that is not a task's echo (`Task build:tokens ...`, which an inner `deno task` prints even under
 * `--quiet`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const said = "Task build:tokens deno run lib/build/tokens.ts\nerror: Permission denied";
 * assert.equal(buildFailureLine(said), "error: Permission denied");
 * ```
 */
export function buildFailureLine(said: string): string {
  const lines = said.split("\n").map((line) => line.trim()).filter((line) => line !== "");
  return lines.find((line) => /^error\b/i.test(line)) ??
    lines.find((line) => !line.startsWith("Task ")) ?? "it failed silently";
}

/** Runs `deno task build` in `root`; undefined on success, else the line that says why it failed. */
async function build(root: string): Promise<string | undefined> {
  try {
    const { success, stderr } = await new Deno.Command(Deno.execPath(), {
      args: ["task", "--quiet", "build"],
      cwd: root,
      env: { NO_COLOR: "1" },
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).output();
    if (success) return undefined;
    return buildFailureLine(new TextDecoder().decode(stderr));
  } catch (error) {
    return messageOf(error);
  }
}

if (import.meta.main && Deno.args[0] === "--stamp") {
  await stampBundle(".");
} else if (import.meta.main) {
  const picked = await pickEntry(".", { build: () => build(".") }).catch((error) => ({
    entry: SOURCE,
    warning: `cannot tell whether ${BUNDLE} is up to date (${error}): starting from ${SOURCE}`,
  }));
  if (picked.warning !== undefined) {
    const line = JSON.stringify({
      time: new Date().toISOString(),
      level: "warn",
      message: picked.warning,
    });
    Deno.stderr.writeSync(new TextEncoder().encode(`${line}\n`));
  }
  Deno.stdout.writeSync(new TextEncoder().encode(startArguments(picked)));
}
