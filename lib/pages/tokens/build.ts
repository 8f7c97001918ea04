/**
 * The build step of the token counts (`deno task build:tokens`, run by `deno task build` and
 * `deno task compile` before they bundle): packs `gpt-tokenizer`'s `o200k_base` ranks
 * (`ranks.ts`) with its split pattern, and writes them twice: indexed, to
 * `dist/app/o200k_ranks.bin`, beside the bundle, which Deno reads (`deno_file.ts`); packed, as the
 * module `dist/tokens/o200k_ranks.js` (`module.ts`), which `lib/pages/tokens.ts` imports with a
 * literal specifier, so that any bundler (a Worker's) carries it. Generated, never committed: it is
 * the package's data in another form, and the lock pins the package.
 *
 * @module
 */

import bpe from "gpt-tokenizer/bpeRanks/o200k_base";
import { O200K_TOKEN_SPLIT_REGEX } from "gpt-tokenizer/encodingParams/constants";
import { indexedForm, indexRanks, packRanks } from "./ranks.ts";
import { ranksModule } from "./module.ts";

/** Where the module is written (`lib/pages/tokens.ts` imports it; any bundler carries it). */
export const MODULE_OUTPUT = new URL("../../../dist/tokens/o200k_ranks.js", import.meta.url);
/** Where the indexed form is written: beside the bundle, which Deno reads (`deno_file.ts`). */
export const FILE_OUTPUT = new URL("../../../dist/app/o200k_ranks.bin", import.meta.url);

/** The packed form of the installed `gpt-tokenizer`'s `o200k_base` ranks. */
export function o200kPacked(): Uint8Array {
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
  for (
    const [output, bytes] of [[MODULE_OUTPUT, o200kModule(packed)], [
      FILE_OUTPUT,
      o200kFile(packed),
    ]] as const
  ) {
    Deno.mkdirSync(new URL(".", output), { recursive: true });
    if (typeof bytes === "string") Deno.writeTextFileSync(output, bytes);
    else Deno.writeFileSync(output, bytes);
  }
}
