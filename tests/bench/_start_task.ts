/**
 * How `deno task start` runs the service, read from `deno.json`, so that the benchmarks start it the
 * way an operator does (its V8 flags and the bundle it builds included) and cannot drift from the
 * task.
 *
 * @module
 */

import denoJson from "../../deno.json" with { type: "json" };

/** The parts of `deno task start`: its `deno run` flags, the entry (or what picks it), its arguments. */
interface StartTask {
  /** The flags between `deno run` and the entry. */
  flags: string[];
  /** The entry module, or the command in `$(...)` that prints it (`lib/build/entry.ts`). */
  entry: { module: string } | { picker: string[] };
  /** The words after the entry (`--listen`). */
  args: string[];
}

function parseStartTask(task: string): StartTask {
  const words = (text: string) => text.trim().split(/\s+/).filter((word) => word !== "");
  const picked = /^deno run (.*?)\$\((deno run [^)]*)\)(.*)$/.exec(task.trim());
  if (picked) {
    return {
      flags: words(picked[1]!),
      entry: { picker: words(picked[2]!) },
      args: words(picked[3]!),
    };
  }
  const run = words(task);
  const index = run.findIndex((word, i) => i > 1 && /\.(ts|js)$/.test(word));
  if (run[0] !== "deno" || run[1] !== "run" || index < 0) {
    throw new Error(`deno task start is not "deno run <flags> <entry or $(picker)> ...": ${task}`);
  }
  return { flags: run.slice(2, index), entry: { module: run[index]! }, args: run.slice(index + 1) };
}

/**
 * The `deno run` flags of `deno task start` (between `run` and its entry module).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const flags = startTaskFlags();
 * assert.ok(flags.includes("--allow-net"));
 * assert.ok(!flags.some((flag) => flag.endsWith(".js") || flag.endsWith(".ts")));
 * ```
 */
export function startTaskFlags(task: string = denoJson.tasks.start): string[] {
  return parseStartTask(task).flags;
}

/** The entries the pickers of this process printed, by checkout and command. */
const picked = new Map<string, string>();

/**
 * The entry module `deno task start` runs, relative to the project's root: the one its picker
 * (`lib/build/entry.ts`) prints, run in the project's folder once per process (it builds the bundle
 * when it is stale: a benchmark that starts several services must not rebuild under the running
 * ones), or the module the task names.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(startTaskEntry("deno run --allow-net main.ts --listen"), "main.ts");
 * ```
 */
export function startTaskEntry(
  task: string = denoJson.tasks.start,
  root: string | URL = new URL("../../", import.meta.url),
): string {
  const { entry } = parseStartTask(task);
  if ("module" in entry) return entry.module;
  const key = `${root} ${entry.picker.join(" ")}`;
  if (!picked.has(key)) {
    const { success, stdout, stderr } = new Deno.Command(Deno.execPath(), {
      args: entry.picker.slice(1),
      cwd: root,
      stdout: "piped",
      stderr: "piped",
    }).outputSync();
    if (!success) {
      throw new Error(`${key} failed:\n${new TextDecoder().decode(stderr)}`);
    }
    picked.set(key, new TextDecoder().decode(stdout).trim());
  }
  return picked.get(key)!;
}

/**
 * The arguments of `deno` that run the service as `deno task start` does:
 * `run <flags> <entry> --listen`, the entry picked (and the bundle built) as the task does.
 */
export function startTaskArgs(): string[] {
  const { flags, args } = parseStartTask(denoJson.tasks.start);
  return ["run", ...flags, startTaskEntry(), ...args];
}

/**
 * The arguments of `deno` that run the service of the checkout in `dir` as its own `deno task start`
 * does (its flags, its entry picked in `dir`): another checkout (`--base`) runs as it was built to.
 */
export function startTaskArgsOf(dir: string): string[] {
  const task = JSON.parse(Deno.readTextFileSync(`${dir}/deno.json`)).tasks.start as string;
  const { flags, args } = parseStartTask(task);
  return ["run", ...flags, startTaskEntry(task, dir), ...args];
}
