/**
 * How `deno task start` runs the service, read from `deno.json`, so that the benchmarks start it the
 * way an operator does (its V8 flags included) and cannot drift from the task.
 *
 * @module
 */

import denoJson from "../../deno.json" with { type: "json" };

/**
 * The `deno run` flags of `deno task start` (between `run` and `main.ts`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const flags = startTaskFlags();
 * assert.ok(flags.includes("--allow-net"));
 * assert.ok(!flags.includes("main.ts"));
 * ```
 */
export function startTaskFlags(task: string = denoJson.tasks.start): string[] {
  const words = task.trim().split(/\s+/);
  const run = words.indexOf("run");
  const main = words.indexOf("main.ts");
  if (words[0] !== "deno" || run !== 1 || main < run) {
    throw new Error(`deno task start is not "deno run <flags> main.ts ...": ${task}`);
  }
  return words.slice(run + 1, main);
}

/** The arguments of `deno` that run the service as `deno task start` does: `run <flags> main.ts --listen`. */
export function startTaskArgs(): string[] {
  return ["run", ...startTaskFlags(), "main.ts", "--listen"];
}
