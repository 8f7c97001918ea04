/**
 * How `deno task start` runs the service, read from `deno.json`, so that the benchmarks start it the
 * way an operator does (its V8 flags and the bundle it builds included) and cannot drift from the
 * task.
 *
 * @module
 */

import denoJson from "../../deno.json" with { type: "json" };

/** The parts of `deno task start`: what it runs before the service, and the `deno run` itself. */
interface StartTask {
  /** Tasks run first (`deno task build && ...`), in order. */
  before: string[];
  /** The words of `deno run <flags> <entry> ...`. */
  run: string[];
}

function parseStartTask(task: string): StartTask {
  const commands = task.split("&&").map((command) => command.trim().split(/\s+/));
  const run = commands.pop() ?? [];
  const before = commands.map((words) => {
    if (words.length !== 3 || words[0] !== "deno" || words[1] !== "task") {
      throw new Error(`deno task start runs something other than a task first: ${task}`);
    }
    return words[2]!;
  });
  if (run[0] !== "deno" || run[1] !== "run" || entryIndex(run) < 0) {
    throw new Error(
      `deno task start is not "[deno task <name> &&] deno run <flags> <entry>": ${task}`,
    );
  }
  return { before, run };
}

/** Where the entry module (the first `.ts` or `.js` word) is in `deno run`'s words. */
function entryIndex(words: readonly string[]): number {
  return words.findIndex((word, index) => index > 1 && /\.(ts|js)$/.test(word));
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
  const { run } = parseStartTask(task);
  return run.slice(2, entryIndex(run));
}

/**
 * The entry module `deno task start` runs, relative to the project's root (`dist/app/main.js`, the
 * bundle that `deno task build` writes).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(startTaskEntry("deno run --allow-net main.ts --listen"), "main.ts");
 * ```
 */
export function startTaskEntry(task: string = denoJson.tasks.start): string {
  const { run } = parseStartTask(task);
  return run[entryIndex(run)]!;
}

/** The tasks {@linkcode prepareStartTask} has run in this process. */
const ran = new Set<string>();

/**
 * Runs what `deno task start` runs before the service (`deno task build`: the bundle), in the
 * project's folder, once per process (a benchmark that starts several services must not rebuild
 * under the ones running); throws with its output if one fails.
 */
export function prepareStartTask(task: string = denoJson.tasks.start): void {
  const root = new URL("../../", import.meta.url);
  for (const name of parseStartTask(task).before) {
    if (ran.has(name)) continue;
    const { success, stderr } = new Deno.Command(Deno.execPath(), {
      args: ["task", "--quiet", name],
      cwd: root,
      stdout: "null",
      stderr: "piped",
    }).outputSync();
    if (!success) {
      throw new Error(`deno task ${name} failed:\n${new TextDecoder().decode(stderr)}`);
    }
    ran.add(name);
  }
}

/**
 * The arguments of `deno` that run the service as `deno task start` does:
 * `run <flags> <entry> --listen`, after running what the task runs first (the build).
 */
export function startTaskArgs(): string[] {
  prepareStartTask();
  return ["run", ...startTaskFlags(), startTaskEntry(), "--listen"];
}
