/**
 * The examples in the JSDoc of `lib/` and `tests/` are tests: `deno task test` runs them (`deno test
 * --doc`), and this file checks that each one asserts its result (an example that only calls something shows
 * nothing and proves nothing), and that one not run says why on its own line.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join, relative } from "node:path";

const ROOT = join(import.meta.dirname!, "..");

/** A fenced code block of a JSDoc comment: where it is, its info string and its code. */
interface Example {
  where: string;
  info: string;
  code: string;
}

/** The fenced blocks of every JSDoc comment of `source` (comment markers removed). */
function examplesOf(source: string, file: string): Example[] {
  const examples: Example[] = [];
  for (const comment of source.matchAll(/\/\*\*[\s\S]*?\*\//g)) {
    const lines = comment[0].split("\n").map((line) => line.replace(/^\s*\*\s?/, ""));
    let open: { info: string; start: number; code: string[] } | undefined;
    lines.forEach((line, i) => {
      const fence = /^```(.*)$/.exec(line.trim());
      if (fence && open === undefined) open = { info: fence[1]!.trim(), start: i, code: [] };
      else if (fence && open) {
        const lineNumber = source.slice(0, comment.index).split("\n").length + open.start;
        examples.push({
          where: `${file}:${lineNumber}`,
          info: open.info,
          code: open.code.join("\n"),
        });
        open = undefined;
      } else open?.code.push(line);
    });
  }
  return examples;
}

/** Every `.ts` file under `dir`. */
async function tsFiles(dir: string): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    const path = join(dir, entry.name);
    if (entry.isDirectory) files.push(...await tsFiles(path));
    else if (entry.name.endsWith(".ts")) files.push(path);
  }
  return files.sort();
}

/** Whether an example is checked by an assertion: a call of `assert` or one of its methods. */
function asserts(code: string): boolean {
  return /\bassert(\.\w+)?\(/.test(code);
}

async function libExamples(): Promise<Example[]> {
  const examples: Example[] = [];
  const files = [...await tsFiles(join(ROOT, "lib")), ...await tsFiles(join(ROOT, "tests"))];
  for (const file of files.filter((f) => !f.endsWith("doc_examples_test.ts"))) {
    examples.push(...examplesOf(await Deno.readTextFile(file), relative(ROOT, file)));
  }
  return examples;
}

Deno.test("examplesOf() finds a JSDoc example, its info string and its code", () => {
  const source = "/**\n * Adds.\n *\n * @example\n * ```ts ignore\n * add(1, 2);\n * ```\n */\n";
  assert.deepEqual(examplesOf(source, "add.ts"), [
    { where: "add.ts:5", info: "ts ignore", code: "add(1, 2);" },
  ]);
  assert.equal(asserts("add(1, 2); // 3"), false);
  assert.equal(asserts("assert.equal(add(1, 2), 3);"), true);
});

Deno.test("every example in lib/ and tests/ asserts its result", async () => {
  const examples = await libExamples();
  assert.ok(examples.length >= 40, `lib/ has its examples (${examples.length})`);
  assert.deepEqual(examples.filter((e) => !asserts(e.code)).map((e) => e.where), []);
});

Deno.test("an example in lib/ or tests/ that is not run says why, on its own first line", async () => {
  const ignored = (await libExamples()).filter((e) => /\bignore\b/.test(e.info));
  assert.deepEqual(
    ignored.filter((e) => !/^\/\/ Not run by `deno test --doc`: .+/.test(e.code)).map((e) =>
      e.where
    ),
    [],
  );
});
