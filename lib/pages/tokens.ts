/**
 * Token counts of the Markdown the service sends (`x-markdown-tokens`, as Cloudflare's Markdown for
 * Agents sends it), so that an agent can budget its context before reading a body.
 *
 * Counted with `gpt-tokenizer`'s `o200k_base`: the encoding of OpenAI's current models (GPT-4o,
 * GPT-4.1, the o-series, GPT-5), exact for them and a close estimate for other models, whose
 * tokenizers are mostly not published. The older `cl100k_base` (GPT-4, GPT-3.5) counts more tokens
 * for the same text, and Cloudflare does not say which encoding its own count uses.
 *
 * The encoding is a 2.4 MB module: parsing it takes about a quarter of a second and keeps tens of
 * MiB resident, so it is imported when the first Markdown representation is built, by the warm-up
 * (0.5 s after start-up) or by a Markdown request before it, never before the first response
 * (lib/README.md, "Cold start"); a first request for JSON or HTML does not wait for it. Each body
 * is counted once, when its representation is built.
 *
 * @module
 */

import { once } from "../once.ts";

/** The encoding {@linkcode loadTokenCounter}'s counts are in. */
export const TOKEN_ENCODING = "o200k_base";

/** The name of the response field carrying a Markdown body's token count. */
export const TOKENS_FIELD = "x-markdown-tokens";

/** Counts the tokens of a text. */
export type TokenCounter = (text: string) => number;

/**
 * Imports the tokenizer, once per process, and answers its counter. Text that looks like a special
 * token (`<|endoftext|>`) is counted as the text it is, never refused: the content is the
 * operator's and agents read it as text.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const count = await loadTokenCounter();
 * assert.equal(count("hello world"), 2);
 * assert.ok(count("<|endoftext|>") > 1);
 * ```
 */
export function loadTokenCounter(): Promise<TokenCounter> {
  return counter();
}

const counter = once(async (): Promise<TokenCounter> => {
  const { countTokens } = await import("gpt-tokenizer/encoding/o200k_base");
  const asText = { disallowedSpecial: new Set<string>() };
  return (text) => countTokens(text, asText);
});
