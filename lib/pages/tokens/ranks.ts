/**
 * The mergeable ranks of a byte-pair encoding (`o200k_base`), packed into one byte array held
 * outside the JavaScript heap, and the module text that carries them in a bundle.
 *
 * `gpt-tokenizer` keeps its ranks as a `Map` of 200,000 strings (about 38 MiB of heap that every
 * garbage collection walks). The count needs less: for a byte sequence, whether it is a token and
 * its rank. So the build packs the ranks as their byte lengths then their bytes, in rank order
 * (1.6 MB), and the service indexes them with an open-addressing hash table of `Int32Array` slots
 * (2 MiB): three typed arrays, whose storage the collector never scans.
 *
 * Packed format: a little-endian `u32` count, then one `u8` length per rank (0 for a rank no lookup
 * returns), then the bytes of every rank in order.
 *
 * @module
 */

/** The ranks as `gpt-tokenizer` ships them: by rank, text or the bytes of text that is not UTF-8. */
export type RankSource = ArrayLike<string | readonly number[] | undefined>;

/** Ranks indexed for lookup by bytes. */
export interface RankTable {
  /** How many ranks the table holds (the highest rank plus one). */
  readonly size: number;
  /**
   * The rank of `bytes[start..end)`, or -1 when that sequence is no token.
   */
  rankOf(bytes: Uint8Array, start: number, end: number): number;
}

const encoder = new TextEncoder();
const strictDecoder = new TextDecoder("utf-8", { fatal: true });

/** The text of `bytes` when they are valid UTF-8, as `gpt-tokenizer` decides it (else undefined). */
function utf8Text(bytes: Uint8Array): string | undefined {
  try {
    return strictDecoder.decode(bytes);
  } catch {
    return undefined;
  }
}

/**
 * The bytes of each rank that `gpt-tokenizer` finds when it looks a byte sequence up, by rank:
 * valid UTF-8 is looked up as text (where a later rank of the same text wins), other bytes in its
 * list of binary ranks. A rank its lookup never returns is left empty.
 *
 * @throws Error when a rank's text is not well-formed, or two binary ranks hold the same bytes
 * (`gpt-tokenizer`'s lookup would then depend on its sort: the count could not follow it)
 */
function reachableBytes(ranks: RankSource): Array<Uint8Array | undefined> {
  const byText = new Map<string, number>();
  const byBytes = new Map<string, number>();
  const bytes: Array<Uint8Array | undefined> = [];
  for (let rank = 0; rank < ranks.length; rank++) {
    const value = ranks[rank];
    if (value === undefined) continue;
    if (typeof value === "string") {
      if (!value.isWellFormed()) throw new Error(`rank ${rank} is not well-formed text`);
      byText.set(value, rank);
      bytes[rank] = encoder.encode(value);
      continue;
    }
    const raw = Uint8Array.from(value);
    const key = raw.join(",");
    if (byBytes.has(key)) {
      throw new Error(`ranks ${byBytes.get(key)} and ${rank} hold the same bytes`);
    }
    byBytes.set(key, rank);
    bytes[rank] = raw;
  }
  return bytes.map((raw, rank) => {
    if (raw === undefined) return undefined;
    const text = utf8Text(raw);
    const found = text === undefined ? byBytes.get(raw.join(",")) : byText.get(text);
    return found === rank ? raw : undefined;
  });
}

/**
 * Packs `ranks` (`gpt-tokenizer`'s `bpeRanks/o200k_base`) into the packed format.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const table = rankTable(packRanks(["a", "b", "ab", [0xff]]));
 * assert.equal(table.rankOf(new TextEncoder().encode("ab"), 0, 2), 2);
 * assert.equal(table.rankOf(new Uint8Array([0xff]), 0, 1), 3);
 * assert.equal(table.rankOf(new TextEncoder().encode("ba"), 0, 2), -1);
 * ```
 */
export function packRanks(ranks: RankSource): Uint8Array {
  const bytes = reachableBytes(ranks);
  const size = ranks.length;
  const total = bytes.reduce((sum, raw) => sum + (raw?.length ?? 0), 0);
  const packed = new Uint8Array(4 + size + total);
  new DataView(packed.buffer).setUint32(0, size, true);
  let offset = 4 + size;
  for (let rank = 0; rank < size; rank++) {
    const raw = bytes[rank];
    if (raw === undefined) continue;
    if (raw.length > 255) throw new Error(`rank ${rank} is longer than 255 bytes`);
    packed[4 + rank] = raw.length;
    packed.set(raw, offset);
    offset += raw.length;
  }
  return packed;
}

/** FNV-1a of `bytes[start..end)`: spreads the ranks' bytes evenly over the slots. */
function hashOf(bytes: Uint8Array, start: number, end: number): number {
  let hash = 0x811c9dc5;
  for (let i = start; i < end; i++) hash = Math.imul(hash ^ bytes[i]!, 0x01000193);
  return hash >>> 0;
}

/**
 * Indexes packed ranks ({@linkcode packRanks}) for lookup by bytes: the packed array is kept as it
 * is, with the offset of each rank and a hash table of ranks (linear probing, at most 40% full).
 *
 * @throws Error when `packed` is shorter than its lengths say
 */
export function rankTable(packed: Uint8Array): RankTable {
  const size = new DataView(packed.buffer, packed.byteOffset, 4).getUint32(0, true);
  const offsets = new Uint32Array(size + 1);
  offsets[0] = 4 + size;
  for (let rank = 0; rank < size; rank++) offsets[rank + 1] = offsets[rank]! + packed[4 + rank]!;
  if (offsets[size] !== packed.length) throw new Error("the packed ranks are truncated");
  let slots = 1;
  while (slots < size * 2.5) slots *= 2;
  const mask = slots - 1;
  // Each slot holds a rank plus one: 0 is empty.
  const index = new Int32Array(slots);
  for (let rank = 0; rank < size; rank++) {
    const start = offsets[rank]!, end = offsets[rank + 1]!;
    if (start === end) continue;
    let slot = hashOf(packed, start, end) & mask;
    while (index[slot] !== 0) slot = (slot + 1) & mask;
    index[slot] = rank + 1;
  }
  return {
    size,
    rankOf(bytes, start, end) {
      const length = end - start;
      for (let slot = hashOf(bytes, start, end) & mask;; slot = (slot + 1) & mask) {
        const entry = index[slot]!;
        if (entry === 0) return -1;
        const from = offsets[entry - 1]!;
        if (offsets[entry]! - from !== length) continue;
        let i = 0;
        while (i < length && packed[from + i] === bytes[start + i]) i++;
        if (i === length) return entry - 1;
      }
    },
  };
}
