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
 * binary, a Cloudflare Worker): no thread, no runtime's API here; a platform says where the build's
 * ranks are ({@linkcode BuiltRanks}). `gpt-tokenizer` holds its ranks as about 38 MiB of heap; here
 * they are packed with a hash index (`tokens/ranks.ts`, 4.4 MB) and counted by the same byte-pair
 * merge (`tokens/bpe.ts`), and the build (`deno task build:tokens`, part of `deno task build` and
 * `deno task compile`) has counted every chunk of the shipped bodies beforehand: the ranks are looked
 * up only for the chunks a configuration brings. It writes them as a file, of which Deno reads only
 * what the lookups touch (`lib/server/token_ranks.ts`), and as `dist/tokens/o200k_ranks.js`, a
 * module of constants that every bundler carries, indexed in memory when a lookup first needs it;
 * where neither was built or may be read, they are packed here from `gpt-tokenizer`'s own ranks,
 * whose module then stays in the heap (lib/pages/README.md, "Markdown twins, token counts, content
 * signals").
 *
 * The counter is made with the first count (the first Markdown representation built: a Markdown
 * request, or the warm-up), never for a first response of another kind (lib/README.md, "Cold
 * start"); each body is counted once, when its representation is built.
 *
 * @module
 */

import { later } from "../timer.ts";
import { tokenCounter } from "./tokens/bpe.ts";
import { bytesOf, type RanksModule } from "./tokens/module.ts";
import {
  type FormReader,
  type IndexedRanks,
  indexRanks,
  type KnownCounts,
  knownCounts,
  packRanks,
  type RankTable,
  rankTable,
  readIndexedForm,
  releaseRanks,
} from "./tokens/ranks.ts";
import type { SplitPattern } from "./tokens/split.ts";

/** The encoding the counts are in. */
export const TOKEN_ENCODING = "o200k_base";

/** The rank table, split pattern and counts known beforehand a counter is made of. */
interface Ranks {
  table: RankTable;
  split: SplitPattern;
  known: KnownCounts;
  /** Lets the ranks go. */
  release(): void;
}

/**
 * The parts of a counter over ranks in memory (`ranks.ts`): indexed when a lookup first needs them
 * (a chunk the build did not count; with none, never), freed at once when let go.
 */
function inMemory(ranksOf: () => IndexedRanks, split: SplitPattern, known: KnownCounts): Ranks {
  let ranks: IndexedRanks | undefined;
  let table: RankTable | undefined;
  return {
    table: {
      rankOf(bytes, start, end) {
        table ??= rankTable(ranks = ranksOf());
        return table.rankOf(bytes, start, end);
      },
    },
    split,
    known,
    release: () => ranks && releaseRanks(ranks),
  };
}

/**
 * Where a platform finds the ranks the build wrote: a reader of the file the build wrote beside the
 * bundle (Deno: `lib/server/token_ranks.ts`), of which only what lookups touch is read, or whether
 * the build's module (`dist/tokens/o200k_ranks.js`) may be imported without asking for a
 * permission. Without one (a Worker, whose bundle carries the module), the module is imported.
 */
export type BuiltRanks = () => Promise<FormReader | boolean>;

/** Options of {@linkcode countTokens}. */
export interface CountOptions {
  /** Where the ranks the build wrote are found (see {@linkcode BuiltRanks}). */
  builtRanks?: BuiltRanks;
}

/** The build's module (`dist/tokens/o200k_ranks.js`), or undefined where it was never built. */
async function builtModule(): Promise<Ranks | undefined> {
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
  return inMemory(
    () => indexRanks(bytesOf(built.RANKS)),
    { source: built.SPLIT, flags: built.SPLIT_FLAGS },
    // An older build's module has no counts: it counts all the same.
    typeof built.KNOWN === "string" ? knownCounts(built.KNOWN) : new Map(),
  );
}

/** The ranks packed from `gpt-tokenizer`'s (its module stays loaded, its ranks in the heap). */
async function packageRanks(): Promise<Ranks> {
  const [{ default: bpe }, { O200K_TOKEN_SPLIT_REGEX }] = await Promise.all([
    import("gpt-tokenizer/bpeRanks/o200k_base"),
    import("gpt-tokenizer/encodingParams/constants"),
  ]);
  return inMemory(() => indexRanks(packRanks(bpe)), O200K_TOKEN_SPLIT_REGEX, new Map());
}

/** A counter, and how to free its ranks. */
interface Counter {
  count(text: string): number;
  release(): void;
}

/**
 * The ranks of the build's file, read piece by piece (`readIndexedForm`), or undefined where it is
 * not one (an older build's: closed).
 */
function fromFile(reader: FormReader): Ranks | undefined {
  try {
    const { table, split, known } = readIndexedForm(reader);
    return { table, split, known: knownCounts(known), release: () => reader.close() };
  } catch {
    reader.close();
    return undefined;
  }
}

/**
 * The counter: from the build's file (Deno), else its module, else the package's ranks (where
 * neither was built, or the file is an older build's or cut: the counts are the same, the memory
 * more).
 */
async function makeCounter(builtRanks: BuiltRanks | undefined): Promise<Counter> {
  const found = builtRanks ? await builtRanks() : true;
  const { table, split, known, release } =
    (typeof found === "object" ? fromFile(found) : undefined) ??
      (found === true ? await builtModule() : undefined) ?? await packageRanks();
  return { count: tokenCounter(table, split, known), release };
}

/** Where the counter finds nothing built: it packs the package's ranks. */
const NOTHING_BUILT: BuiltRanks = () => Promise.resolve(false);

/**
 * The counter while texts wait to be counted. Let go once none waits (its file closed, or its ranks
 * in memory freed) rather than kept for a count that may never come: each body is counted once,
 * when its representation is built, nearly all of them by the warm-up at once. The next text makes
 * it again, in about a millisecond.
 */
let loaded: Promise<Counter> | undefined;
/** How many texts wait for {@linkcode loaded}. */
let waiting = 0;

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
export async function countTokens(text: string, options: CountOptions = {}): Promise<number> {
  waiting++;
  const counter = loaded ??= makeCounter(options.builtRanks);
  try {
    return (await counter).count(text);
  } catch (error) {
    // The build's file failing under a count (cut since it was opened, its table broken): counted
    // from the package's ranks instead, as where nothing was built, never to a wrong number.
    if (options.builtRanks === undefined || options.builtRanks === NOTHING_BUILT) throw error;
    if (loaded === counter) {
      loaded = undefined;
      counter.then((made) => made.release(), () => {});
    }
    return await countTokens(text, { builtRanks: NOTHING_BUILT });
  } finally {
    // Let go a moment after the last count, unless another came meanwhile (the Markdown 404 is
    // counted just after the first body), and never before this count is answered. `later`:
    // `setTimeout`'s first use would load Node's timers first.
    if (--waiting === 0) {
      later(0, () => {
        if (waiting > 0 || loaded !== counter) return;
        loaded = undefined;
        counter.then((made) => made.release(), () => {});
      });
    }
  }
}
