/**
 * The build step of the token counts (`deno task build:tokens`, run by `deno task build` and
 * `deno task compile` before they bundle): packs `gpt-tokenizer`'s `o200k_base` ranks
 * (`ranks.ts`) with its split pattern, and writes them: indexed, to `o200k_ranks.bin` in
 * `lib/server/` and in `dist/app/`, beside the bundle, which Deno reads
 * (`lib/server/token_ranks.ts`); packed, as the module `dist/tokens/o200k_ranks.js` (`module.ts`), which `lib/pages/tokens.ts` imports with a
 * literal specifier, so that any bundler (a Worker's) carries it. Generated, never committed
 * (`.gitignore`): they are the package's data in another form, and the lock pins the package.
 *
 * @module
 */

import bpe from "gpt-tokenizer/bpeRanks/o200k_base";
import { O200K_TOKEN_SPLIT_REGEX } from "gpt-tokenizer/encodingParams/constants";
import { checkRanks, indexedForm, indexRanks, packRanks } from "../pages/tokens/ranks.ts";
import { ranksModule } from "../pages/tokens/module.ts";

/** Where the module is written (`lib/pages/tokens.ts` imports it; any bundler carries it). */
const MODULE_OUTPUT = new URL("../../dist/tokens/o200k_ranks.js", import.meta.url);
/**
 * Where the indexed form is written: beside `lib/server/token_ranks.ts`, which reads it from its
 * own folder, for the sources (and the compiled binary, which embeds it) and in `dist/app/` for the bundle.
 */
const FILE_OUTPUTS: readonly URL[] = [
  new URL("../server/o200k_ranks.bin", import.meta.url),
  new URL("../../dist/app/o200k_ranks.bin", import.meta.url),
];

/**
 * The packed form of the installed `gpt-tokenizer`'s `o200k_base` ranks.
 *
 * @throws Error when its lookup would not find every rank by its bytes (`checkRanks`)
 */
export function o200kPacked(): Uint8Array {
  checkRanks(bpe);
  return packRanks(bpe);
}

/** The text of the module, from the packed ranks (`o200kPacked()`). */
export function o200kModule(packed: Uint8Array = o200kPacked()): string {
  return ranksModule("o200k_base", { packed, split: O200K_TOKEN_SPLIT_REGEX });
}

/** The indexed form, from the packed ranks (`o200kPacked()`). */
export function o200kFile(packed: Uint8Array = o200kPacked()): Uint8Array {
  return indexedForm(indexRanks(packed), O200K_TOKEN_SPLIT_REGEX);
}

if (import.meta.main) {
  const packed = o200kPacked();
  Deno.mkdirSync(new URL(".", MODULE_OUTPUT), { recursive: true });
  Deno.writeTextFileSync(MODULE_OUTPUT, o200kModule(packed));
  const file = o200kFile(packed);
  for (const output of FILE_OUTPUTS) {
    Deno.mkdirSync(new URL(".", output), { recursive: true });
    Deno.writeFileSync(output, file);
  }
}
