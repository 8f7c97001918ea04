/**
 * Counts the tokens of a text with a byte-pair encoding's ranks ({@linkcode RankTable}), exactly
 * as `gpt-tokenizer`'s `countTokens` does: its split pattern cuts the text into chunks, byte-pair
 * merges never cross a chunk, so the count is the sum of the chunks' counts. A chunk that is a
 * token counts one; any other is merged from its UTF-8 bytes, always joining the adjacent pair of
 * the lowest rank (the first of equals), until no adjacent pair is a token.
 *
 * Text that looks like a special token (`<|endoftext|>`) is counted as the text it is, as
 * `countTokens(text, { disallowedSpecial: new Set() })` counts it.
 *
 * @module
 */

import type { KnownCounts, RankTable } from "./ranks.ts";
import { type SplitPattern, splitter } from "./split.ts";

const encoder = new TextEncoder();

/** The rank of the merge of parts `i` and `i + 1` of `bytes` cut at `starts` (none: Infinity). */
function pairRank(table: RankTable, bytes: Uint8Array, starts: number[], i: number): number {
  const end = starts[i + 2];
  if (end === undefined) return Infinity;
  const rank = table.rankOf(bytes, starts[i]!, end);
  return rank === -1 ? Infinity : rank;
}

/** How many tokens the byte-pair merge of `bytes` leaves. */
function mergedCount(table: RankTable, bytes: Uint8Array): number {
  const starts: number[] = [];
  const ranks: number[] = [];
  for (let i = 0; i <= bytes.length; i++) starts.push(i);
  for (let i = 0; i <= bytes.length; i++) ranks.push(pairRank(table, bytes, starts, i));
  while (starts.length > 1) {
    let lowest = Infinity;
    let at = -1;
    for (let i = 0; i < ranks.length - 1; i++) {
      if (ranks[i]! < lowest) {
        lowest = ranks[i]!;
        at = i;
      }
    }
    if (at === -1) break;
    starts.splice(at + 1, 1);
    ranks.splice(at, 1);
    ranks[at] = pairRank(table, bytes, starts, at);
    if (at > 0) ranks[at - 1] = pairRank(table, bytes, starts, at - 1);
  }
  return starts.length - 1;
}

/** The tokens of one chunk of the split (merged from its bytes unless it is a token). */
export function chunkCount(table: RankTable, chunk: string): number {
  const bytes = encoder.encode(chunk);
  // `gpt-tokenizer` looks the whole chunk up as text first: text with a lone surrogate is none
  // of its ranks, and is merged from its bytes (where the surrogate is U+FFFD) instead.
  if (chunk.isWellFormed() && table.rankOf(bytes, 0, bytes.length) !== -1) return 1;
  return mergedCount(table, bytes);
}

/**
 * A counter of the tokens of a text: `split` cuts it into chunks (`gpt-tokenizer`'s split pattern
 * of the encoding: ASCII text by its ASCII form, `split.ts`), `table` holds the encoding's ranks, and
 * `known` the counts of chunks counted before (the build's, `o200kKnown()` of lib/build/tokens.ts),
 * which a chunk found there is not merged again for.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { indexRanks, packRanks, rankTable } from "./ranks.ts";
 * // A toy encoding: its four bytes, then "ab", then "abc".
 * const ranks = indexRanks(packRanks(["a", "b", "c", " ", "ab", "abc"]));
 * const count = tokenCounter(rankTable(ranks), / ?[a-z]+/g);
 * assert.equal(count("abc"), 1);
 * assert.equal(count("cab"), 2); // c, ab
 * assert.equal(count("abc cba"), 5); // abc, then " cba" in four: merges never cross chunks
 * // A count known beforehand is taken as it is.
 * assert.equal(tokenCounter(rankTable(ranks), / ?[a-z]+/g, new Map([[" cba", 4]]))("abc cba"), 5);
 * ```
 */
export function tokenCounter(
  table: RankTable,
  split: SplitPattern,
  known: KnownCounts = new Map(),
): (text: string) => number {
  const chunksOf = splitter(split);
  return (text) => {
    let count = 0;
    chunksOf(text, (chunk) => count += known.get(chunk) ?? chunkCount(table, chunk));
    return count;
  };
}
