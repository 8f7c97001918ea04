/**
 * Runs Deno test files on Node (`node --test-force-exit tests/node/_deno_test_on_node.ts [file...]`;
 * `npm test` runs those of `node_files.json`): the
 * handler's tests that need no Deno API but `Deno.test`, which is given here over `node:test`, and
 * any `npm:` specifier resolved to the package npm installed. The files that use fast-check are left
 * to Deno: package.json has no test-only package, which Deno would fetch at every first start too
 * (tests/start_test.ts). Exits non-zero when a test
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

registerHooks({
  resolve: (specifier, context, next) =>
    next(specifier.startsWith("npm:") ? bareOf(specifier) : specifier, context),
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
