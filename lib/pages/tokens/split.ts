/**
 * The split of a text into the chunks byte-pair merges never cross, by the encoding's pattern, and
 * cheaply where the text is ASCII.
 *
 * `o200k_base`'s pattern classes characters by Unicode properties (`\p{L}`, `\p{Lu}`, `\p{N}`,
 * `\p{M}`...): V8 takes about 2 ms to parse it and 2 ms more to compile it, longer than counting a
 * page. On ASCII text those classes are ASCII ranges (`\p{L}` is `[A-Za-z]`, `\p{Lu}` `[A-Z]`, `\p{Ll}`
 * `[a-z]`, `\p{N}` `[0-9]`; no ASCII character is in `\p{Lt}`, `\p{Lm}`, `\p{Lo}` or `\p{M}`), so the
 * same pattern written with them ({@linkcode O200K_ASCII_SPLIT}) finds the same chunks, and compiles
 * in a tenth of a millisecond. Every body the service ships is ASCII, and so are most
 * configurations; any other text is split by the encoding's own pattern.
 * `tests/pages/tokens_test.ts` pins the equivalence.
 *
 * @module
 */

/** A split pattern: a regular expression's source and flags (a `RegExp` is one). */
export interface SplitPattern {
  readonly source: string;
  readonly flags: string;
}

/** The contraction suffix of `o200k_base`'s pattern (`'s`, `'ll`, `'re`..., either case). */
const CONTRACTION = String.raw`(?:'(?:[sS]|[dD]|[mM]|[tT]|[lL][lL]|[vV][eE]|[rR][eE]))?`;

/** `o200k_base`'s split pattern (flags `gu`), as `gpt-tokenizer` 4.0.0 has it. */
export const O200K_SPLIT: SplitPattern = {
  source: String
    .raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+${CONTRACTION}` +
    String
      .raw`|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*${CONTRACTION}` +
    String.raw`|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
  flags: "gu",
};

/** {@linkcode O200K_SPLIT} on ASCII text: the same alternatives, each class as its ASCII range. */
export const O200K_ASCII_SPLIT: SplitPattern = {
  source: String.raw`[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+${CONTRACTION}` +
    String.raw`|[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*${CONTRACTION}` +
    String.raw`|[0-9]{1,3}| ?[^\sA-Za-z0-9]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
  flags: "g",
};

/** A character outside ASCII. */
const NOT_ASCII = /[\u0080-\uffff]/;

/**
 * A splitter by `pattern`: calls `each` with every chunk of a text, in order, by
 * {@linkcode O200K_ASCII_SPLIT} where `pattern` is {@linkcode O200K_SPLIT} and the text is ASCII,
 * else by `pattern` (each compiled when first used). One chunk at a time: none is kept.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const split = splitter(O200K_SPLIT);
 * const chunksOf = (text: string) => {
 *   const chunks: string[] = [];
 *   split(text, (chunk) => chunks.push(chunk));
 *   return chunks;
 * };
 * assert.deepEqual(chunksOf("It's 2026, Ünïcode!"), ["It's", " ", "202", "6", ",", " Ünïcode", "!"]);
 * assert.deepEqual(chunksOf("It's 2026, Unicode!"), ["It's", " ", "202", "6", ",", " Unicode", "!"]);
 * ```
 */
export function splitter(
  pattern: SplitPattern,
): (text: string, each: (chunk: string) => void) => void {
  const asciiToo = pattern.source === O200K_SPLIT.source && pattern.flags === O200K_SPLIT.flags;
  let full: RegExp | undefined;
  let ascii: RegExp | undefined;
  return (text, each) => {
    const split = asciiToo && !NOT_ASCII.test(text)
      ? ascii ??= new RegExp(O200K_ASCII_SPLIT.source, O200K_ASCII_SPLIT.flags)
      : full ??= new RegExp(pattern.source, pattern.flags);
    split.lastIndex = 0;
    for (let found = split.exec(text); found !== null; found = split.exec(text)) {
      // (A pattern that matches nothing, which the encodings' never do, moves on a character.)
      if (found[0] === "") split.lastIndex++;
      else each(found[0]);
    }
  };
}
