/**
 * The build step of the token counts (`deno task build:tokens`, run by `deno task build` and
 * `deno task compile` before they bundle): packs `gpt-tokenizer`'s `o200k_base` ranks
 * (`ranks.ts`) with its split pattern and the counts of the chunks of the default Markdown bodies
 * (`o200kKnown()`), and writes them to `dist/tokens/`: indexed, as `o200k_ranks.bin`, which both
 * entries read (Deno's `lib/server/token_ranks.ts`, Node's `lib/node/files.ts`, from the sources and
 * from the bundle alike: each finds it two folders up); packed, as the module `o200k_ranks.js`
 * (`module.ts`), which `lib/pages/tokens.ts` imports with a literal specifier, so that any bundler
 * (a Worker's) carries it. Generated, never committed (`dist/` is ignored): they are the package's
 * data and `static/` in another form, and the lock pins the package.
 *
 * It names no Deno API and imports no entry: Node runs it as well (`node lib/build/tokens.ts`, run by
 * `npm ci`), so that a machine with only Node has the file too (without it, counting packs
 * `gpt-tokenizer`'s ranks in memory: about 50 MiB more resident, tests/bench/README.md, "Node").
 *
 * @module
 */

import bpe from "gpt-tokenizer/bpeRanks/o200k_base";
import { O200K_TOKEN_SPLIT_REGEX } from "gpt-tokenizer/encodingParams/constants";
import { loadConfig } from "../config/config.ts";
import { recordEnv } from "../config/env.ts";
import { errorCatalog, errorMarkdown } from "../errors.ts";
import { loadContent, STATIC_DIR, type StaticFiles } from "../pages/content.ts";
import { PAGES } from "../pages/site_pages.ts";
import { chunkCount } from "../pages/tokens/bpe.ts";
import { splitter } from "../pages/tokens/split.ts";
import {
  checkRanks,
  indexedForm,
  indexRanks,
  packRanks,
  rankTable,
} from "../pages/tokens/ranks.ts";
import { ranksModule } from "../pages/tokens/module.ts";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import process from "node:process";

/** Where the module is written (`lib/pages/tokens.ts` imports it; any bundler carries it). */
const MODULE_OUTPUT = new URL("../../dist/tokens/o200k_ranks.js", import.meta.url);
/**
 * Where the indexed form is written: beside the module, where Deno's and Node's readers find it
 * (and the compiled binary, which embeds it: `deno task compile`'s `--include`).
 */
const FILE_OUTPUT = new URL("../../dist/tokens/o200k_ranks.bin", import.meta.url);

/**
 * `static/` as this step reads it: through `node:fs`, so that Node runs the step too (`npm ci`'s
 * postinstall, package.json). No ranks: this step makes them.
 */
const BUILD_STATIC_FILES: StaticFiles = {
  dir: STATIC_DIR,
  read: (path) => readFileSync(path, "utf8"),
};

/**
 * The packed form of the installed `gpt-tokenizer`'s `o200k_base` ranks.
 *
 * @throws Error when its lookup would not find every rank by its bytes (`checkRanks`)
 */
export function o200kPacked(): Uint8Array {
  checkRanks(bpe);
  return packRanks(bpe);
}

/**
 * The Markdown bodies the service sends with the default configuration, from `static/`: the pages
 * (their twins too), the Platform, `llms.txt` and the Markdown 404.
 *
 * @throws Error when the defaults or `static/` do not load (start-up would say the same)
 */
export function defaultMarkdownBodies(): string[] {
  const loaded = loadConfig(recordEnv({}));
  if (!loaded.ok) throw new Error(`the default configuration does not load: ${loaded.errors}`);
  const content = loadContent(loaded.config, BUILD_STATIC_FILES);
  if (!content.ok) throw new Error(`static/ does not load: ${content.errors.join("; ")}`);
  const { platformMarkdown, llms } = content.content;
  return [
    platformMarkdown,
    llms,
    ...PAGES.map((page) => content.content[page.content].markdown),
    errorMarkdown("not_found", errorCatalog(loaded.config).not_found),
  ];
}

/**
 * The count of every chunk of `bodies` (the split of `o200k_base`), from the packed ranks: the
 * counter takes these as they are, and merges only the chunks it does not find here (those a
 * configuration brings), so that the first count of a body needs no byte-pair merge to warm up.
 * A chunk's count depends on the chunk alone: with `static/` edited since the build, fewer are
 * found, none is wrong.
 */
export function o200kKnown(
  packed: Uint8Array = o200kPacked(),
  bodies: readonly string[] = defaultMarkdownBodies(),
): Map<string, number> {
  const table = rankTable(indexRanks(packed));
  const chunksOf = splitter(O200K_TOKEN_SPLIT_REGEX);
  const known = new Map<string, number>();
  for (const body of bodies) {
    chunksOf(body, (chunk) => {
      if (!known.has(chunk)) known.set(chunk, chunkCount(table, chunk));
    });
  }
  return known;
}

/** The text of the module, from the packed ranks (`o200kPacked()`) and the known counts. */
export function o200kModule(
  packed: Uint8Array = o200kPacked(),
  known: ReadonlyMap<string, number> = o200kKnown(packed),
): string {
  return ranksModule("o200k_base", { packed, split: O200K_TOKEN_SPLIT_REGEX, known });
}

/** The indexed form, from the packed ranks (`o200kPacked()`) and the known counts. */
export function o200kFile(
  packed: Uint8Array = o200kPacked(),
  known: ReadonlyMap<string, number> = o200kKnown(packed),
): Uint8Array {
  return indexedForm(indexRanks(packed), O200K_TOKEN_SPLIT_REGEX, known);
}

/**
 * Writes `bytes` to `url` through a file beside it renamed over it: a service running from this
 * checkout reads the ranks file piece by piece, and a file rewritten in place under its open handle
 * would give it other bytes than its index says (the rename leaves it the file it opened).
 */
function writeAtomically(url: URL, bytes: Uint8Array): void {
  const temporary = new URL(`${url.href}.${process.pid}.tmp`);
  writeFileSync(temporary, bytes);
  renameSync(temporary, url);
}

if (import.meta.main) {
  const packed = o200kPacked();
  const known = o200kKnown(packed);
  mkdirSync(new URL(".", MODULE_OUTPUT), { recursive: true });
  writeAtomically(MODULE_OUTPUT, new TextEncoder().encode(o200kModule(packed, known)));
  writeAtomically(FILE_OUTPUT, o200kFile(packed, known));
}
