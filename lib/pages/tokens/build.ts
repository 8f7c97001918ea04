/**
 * The build step of the token counts (`deno task build:tokens`, run by `deno task build` and
 * `deno task compile` before they bundle): packs `gpt-tokenizer`'s `o200k_base` ranks
 * (`ranks.ts`) and writes them with its split pattern to `dist/tokens/o200k_ranks.js`
 * (`module.ts`), which `lib/pages/tokens.ts` imports. Generated, never committed: it is the
 * package's data in another form, and the lock pins the package.
 *
 * @module
 */

import bpe from "gpt-tokenizer/bpeRanks/o200k_base";
import { O200K_TOKEN_SPLIT_REGEX } from "gpt-tokenizer/encodingParams/constants";
import { packRanks } from "./ranks.ts";
import { ranksModule } from "./module.ts";

/** Where the module is written, relative to the project's folder (`lib/pages/tokens.ts` imports it). */
export const OUTPUT = new URL("../../../dist/tokens/o200k_ranks.js", import.meta.url);

/** The text of the module, from the installed `gpt-tokenizer`. */
export function o200kModule(): string {
  return ranksModule("o200k_base", { packed: packRanks(bpe), split: O200K_TOKEN_SPLIT_REGEX });
}

if (import.meta.main) {
  Deno.mkdirSync(new URL(".", OUTPUT), { recursive: true });
  Deno.writeTextFileSync(OUTPUT, o200kModule());
}
