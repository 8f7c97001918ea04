/**
 * Token counts of the Markdown the service sends (`x-markdown-tokens`, as Cloudflare's Markdown for
 * Agents sends it), so that an agent can budget its context before reading a body.
 *
 * Counted in `o200k_base`: the encoding of OpenAI's current models (GPT-4o, GPT-4.1, the o-series,
 * GPT-5), exact for them and a close estimate for other models, whose tokenizers are mostly not
 * published. The older `cl100k_base` (GPT-4, GPT-3.5) counts more tokens for the same text, and
 * Cloudflare does not say which encoding its own count uses. The count equals `gpt-tokenizer`'s
 * `countTokens` for any text (`tests/pages/tokens_test.ts`).
 *
 * This is the seam the request path calls, and it runs anywhere (Deno, Deno Deploy, the compiled
 * binary, a Cloudflare Worker): no thread, no file, no `Deno` API. `gpt-tokenizer` holds its ranks
 * as about 38 MiB of heap; here they are one packed byte array and a hash index, about 4 MiB
 * outside the heap (`tokens/ranks.ts`), counted by the same byte-pair merge (`tokens/bpe.ts`). The
 * build packs them (`deno task build:tokens`, part of `deno task build` and `deno task compile`)
 * into `dist/tokens/o200k_ranks.js`, a module of constants that every bundler carries; where it
 * was never built (the sources run as they are), they are packed here from `gpt-tokenizer`'s own
 * ranks, which then stay in the heap (lib/pages/README.md, "Markdown twins, token counts, content
 * signals").
 *
 * Loaded when the first Markdown representation is built (the warm-up, or a Markdown request
 * before it), never before the first response (lib/README.md, "Cold start"); each body is counted
 * once, when its representation is built.
 *
 * @module
 */

import { once } from "../once.ts";
import { tokenCounter } from "./tokens/bpe.ts";
import type { RanksModule } from "./tokens/module.ts";
import { bytesOf } from "./tokens/module.ts";
import { packRanks, rankTable } from "./tokens/ranks.ts";

/** The encoding the counts are in. */
export const TOKEN_ENCODING = "o200k_base";

/** The packed ranks and split pattern the counter is made of. */
interface Ranks {
  packed: Uint8Array;
  split: RegExp;
}

/** The build's ranks (`dist/tokens/o200k_ranks.js`), or undefined where it was never built. */
async function builtRanks(): Promise<Ranks | undefined> {
  let built: RanksModule;
  try {
    // A literal specifier: the bundle and the compiled binary carry the module.
    built = await import("../../dist/tokens/o200k_ranks.js");
  } catch {
    return undefined;
  }
  if (built.ENCODING !== TOKEN_ENCODING) {
    throw new Error(`dist/tokens/o200k_ranks.js holds ${built.ENCODING}, not ${TOKEN_ENCODING}`);
  }
  return { packed: bytesOf(built.RANKS), split: new RegExp(built.SPLIT, built.SPLIT_FLAGS) };
}

/** The ranks packed from `gpt-tokenizer`'s (its module stays loaded, its ranks in the heap). */
async function packageRanks(): Promise<Ranks> {
  const [{ default: bpe }, { O200K_TOKEN_SPLIT_REGEX }] = await Promise.all([
    import("gpt-tokenizer/bpeRanks/o200k_base"),
    import("gpt-tokenizer/encodingParams/constants"),
  ]);
  return { packed: packRanks(bpe), split: O200K_TOKEN_SPLIT_REGEX };
}

/** The counter, made once: from the build's ranks, else from the package's. */
const counter = once(async (): Promise<(text: string) => number> => {
  const { packed, split } = await builtRanks() ?? await packageRanks();
  return tokenCounter(rankTable(packed), split);
});

/**
 * The number of `o200k_base` tokens of `text`, as `gpt-tokenizer`'s `countTokens(text, {
 * disallowedSpecial: new Set() })` counts it: text that looks like a special token
 * (`<|endoftext|>`) is counted as the text it is, never refused (the content is the operator's, and
 * agents read it as text).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(await Promise.all([countTokens("hello world"), countTokens("<|endoftext|>")]), [2, 7]);
 * ```
 */
export async function countTokens(text: string): Promise<number> {
  return (await counter())(text);
}
