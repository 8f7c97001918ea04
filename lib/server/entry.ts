/**
 * Picks the module `deno task start` runs, and prints its path on stdout: the bundle
 * (`dist/app/main.js`, the faster cold start) when it is at least as new as every source it is built
 * from, after building it when it is missing or older and the checkout can be written; otherwise
 * `main.ts`, with one warning line on stderr.
 *
 * A checkout the service may only read (a service account, a container's non-root user, a read-only
 * file system) still starts: from the bundle that `deno task build` wrote at install time, or from
 * the sources. Freshness is judged as `make` judges it, by modification times: cheap (a few dozen
 * `stat` calls, no file read), and a checkout or edit always makes a source newer than the bundle.
 *
 * Run by the task as `deno run --allow-read=. --allow-write=./dist/app --allow-run lib/server/entry.ts`
 * from the project's folder.
 *
 * @module
 */

/** The bundle that `deno task build` writes, relative to the project's folder. */
export const BUNDLE = "dist/app/main.js";
/** The source entry point, run when the bundle is stale and cannot be built. */
export const SOURCE = "main.ts";
/** What the bundle is built from, besides every file under `lib/`: files and folders to walk. */
export const BUILD_INPUTS: readonly string[] = ["main.ts", "deno.json", "lib"];

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

/**
 * The newest modification time (ms since the epoch) of the files under `paths` (relative to
 * `root`), walking folders; undefined when none exists.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const root = Deno.makeTempDirSync();
 * Deno.writeTextFileSync(`${root}/a.ts`, "");
 * Deno.utimeSync(`${root}/a.ts`, 1, 1);
 * assert.equal(newestMtime(root, ["a.ts", "missing"]), 1000);
 * ```
 */
export function newestMtime(root: string, paths: readonly string[]): number | undefined {
  let newest: number | undefined;
  const visit = (path: string) => {
    let info: Deno.FileInfo;
    try {
      info = Deno.statSync(path);
    } catch {
      return;
    }
    if (info.isDirectory) {
      for (const entry of Deno.readDirSync(path)) visit(`${path}/${entry.name}`);
      return;
    }
    const mtime = info.mtime?.getTime() ?? Number.POSITIVE_INFINITY;
    newest = Math.max(newest ?? mtime, mtime);
  };
  for (const path of paths) visit(`${root}/${path}`);
  return newest;
}

/** Whether `root`'s bundle exists and is at least as new as every build input. */
export function bundleIsFresh(root: string): boolean {
  const bundle = newestMtime(root, [BUNDLE]);
  const sources = newestMtime(root, BUILD_INPUTS) ?? 0;
  return bundle !== undefined && bundle >= sources;
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
  if (bundleIsFresh(root)) return { entry: BUNDLE };
  const failure = await options.build();
  if (failure === undefined && bundleIsFresh(root)) return { entry: BUNDLE };
  const missing = newestMtime(root, [BUNDLE]) === undefined ? "missing" : "older than the sources";
  return {
    entry: SOURCE,
    warning: `the bundle ${BUNDLE} is ${missing} and cannot be built here (${
      failure ?? "the build left it stale"
    }): starting from ${SOURCE}, a slower cold start; run "deno task build" as a user who may write the checkout to start from the bundle`,
  };
}

/** Runs `deno task build` in `root`; undefined on success, else the first line it printed. */
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
    const said = new TextDecoder().decode(stderr);
    return said.split("\n").find((line) => line.trim() !== "")?.trim() ?? "it failed silently";
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

if (import.meta.main) {
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
  Deno.stdout.writeSync(new TextEncoder().encode(picked.entry));
}
