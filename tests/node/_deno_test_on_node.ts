/**
 * Runs Deno test files on Node (`node --test-force-exit tests/node/_deno_test_on_node.ts [file...]`;
 * `npm test` runs those of `node_files.json`): the
 * handler's tests that need no Deno API but `Deno.test`, which is given here over `node:test`, and
 * the `npm:` specifiers of their test-only packages resolved to the same packages installed by npm
 * (package.json's devDependencies pin the versions tests/deno.lock holds; the longest properties run
 * a tenth as many times, `_fast_check.ts`). Exits non-zero when a test
 * fails; node:test prints each result.
 *
 * @module
 */

import { readFileSync } from "node:fs";
import { registerHooks } from "node:module";
import process from "node:process";
import { test } from "node:test";
import { pathToFileURL } from "node:url";

/** `npm:name@version/path` as the bare specifier `name/path` npm installed. */
function bareOf(specifier: string): string {
  const match = /^npm:\/?((?:@[^/]+\/)?[^@/]+)(?:@[^/]+)?(\/.*)?$/.exec(specifier);
  return match ? `${match[1]}${match[2] ?? ""}` : specifier;
}

/** fast-check with fewer runs (`_fast_check.ts`), for the files whose properties take longest. */
const FAST_CHECK = new URL("./_fast_check.ts", import.meta.url).href;

/**
 * The files whose properties take most of the time (about 90 s of 110 s on Node with their full
 * runs): run with a tenth of them. The others run in full: some assert what their runs covered.
 */
const FEWER_RUNS = [
  "tests/limit/local_first/local_first_store_test.ts",
  "tests/limit/memory/memory_store_test.ts",
];

registerHooks({
  resolve: (specifier, context, next) =>
    specifier.startsWith("npm:fast-check@") &&
      FEWER_RUNS.some((file) => context.parentURL?.endsWith(file))
      ? next(FAST_CHECK, context)
      : next(specifier.startsWith("npm:") ? bareOf(specifier) : specifier, context),
});

/** What a Deno test function receives, as far as these tests use it. */
interface StepContext {
  step(name: string, fn: (t: StepContext) => unknown): Promise<boolean>;
}

type TestFn = (t: StepContext) => unknown;
type TestDefinition = { name: string; fn: TestFn; ignore?: boolean; only?: boolean };

/** A Deno test's context over node:test's: each step is a subtest. */
function contextOf(node: { test: typeof test }): StepContext {
  return {
    step: async (name, fn) => {
      await node.test(name, async (sub) => {
        await fn(contextOf(sub));
      });
      return true;
    },
  };
}

/** `Deno.test` in its three forms: (name, fn), (name, options, fn), (definition). */
function denoTest(
  first: string | TestDefinition | TestFn,
  second?: TestFn | Partial<TestDefinition>,
  third?: TestFn,
): void {
  const definition: TestDefinition = typeof first === "string"
    ? typeof second === "function"
      ? { name: first, fn: second }
      : { ...second, name: first, fn: third! }
    : typeof first === "function"
    ? { name: first.name, fn: first }
    : first;
  test(definition.name, { skip: definition.ignore === true }, async (t) => {
    await definition.fn(contextOf(t));
  });
}

(globalThis as unknown as { Deno: unknown }).Deno = { test: denoTest };

/**
 * The files given, else those of `node_files.json` (`npm test`): the handler's tests that import no
 * Deno API, but `tests/respond/response_cache_test.ts`, whose kept responses Node's entry does not
 * use (`keep: false`, lib/node/main.ts): after a thousand unread responses, reading a kept
 * response's clone never settles on Node (its test hung in about 1 run in 10).
 */
const files: string[] = process.argv.length > 2
  ? process.argv.slice(2)
  : JSON.parse(readFileSync(new URL("./node_files.json", import.meta.url), "utf8"));
for (const file of files) await import(pathToFileURL(file).href);
