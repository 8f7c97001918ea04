/**
 * The mergeable ranks of a byte-pair encoding (`o200k_base`), packed into typed arrays held outside
 * the JavaScript heap, in two forms the build writes (`lib/build/tokens.ts`).
 *
 * `gpt-tokenizer` keeps its ranks as a `Map` of 200,000 strings (about 38 MiB of heap that every
 * garbage collection walks). The count needs less: for a byte sequence, whether it is a token and
 * its rank. So the ranks are packed as their byte lengths then their bytes, in rank order (1.6 MB:
 * the *packed* form), and looked up through the offset of each rank and an open-addressing hash
 * table of rank slots (linear probing, at most half full): the *indexed* form, 4.4 MB, which the
 * build writes as one file that is used where it is read, without a loop over its contents.
 *
 * Packed form: a little-endian `u32` count, then one `u8` length per rank (0 for a rank the encoding
 * skips), then the bytes of every rank in order. Indexed form: a header of five `u32` (magic,
 * count, slots, length of the packed form, length of the split pattern), the split pattern as
 * `flags/source` in UTF-8 padded to four bytes, the offsets (`u32`, count + 1), the slots (`i32`,
 * rank + 1, 0 for empty), then the packed form; typed arrays of the platform's byte order, checked
 * by the magic number.
 *
 * @module
 */

import type { SplitPattern } from "./split.ts";

/** The ranks as `gpt-tokenizer` ships them: by rank, text or the bytes of text that is not UTF-8. */
export type RankSource = ArrayLike<string | readonly number[] | undefined>;

/** Ranks indexed for lookup by bytes. */
export interface RankTable {
  /** The rank of `bytes[start..end)`, or -1 when that sequence is no token. */
  rankOf(bytes: Uint8Array, start: number, end: number): number;
}

/** The arrays a {@linkcode RankTable} reads. */
export interface IndexedRanks {
  /** The packed form. */
  readonly packed: Uint8Array;
  /** Where each rank's bytes start in `packed`, and where the last ends. */
  readonly offsets: Uint32Array;
  /** The hash table: each slot a rank plus one, 0 where empty; a power of two long. */
  readonly slots: Int32Array;
}

const encoder = new TextEncoder();
const strictDecoder = new TextDecoder("utf-8", { fatal: true });

/** Whether `bytes` are valid UTF-8 (as `gpt-tokenizer` decides which lookup a sequence goes to). */
function isUtf8(bytes: Uint8Array): boolean {
  try {
    strictDecoder.decode(bytes);
    return true;
  } catch {
    return false;
  }
}

/**
 * Checks that `gpt-tokenizer`'s lookup finds the ranks of `ranks` as {@linkcode packRanks} packs
 * them, so that the count is its count: no text twice (its `Map` keeps the later), no text that is
 * not well-formed, no bytes twice (its binary search would find either). Run by the build and the
 * tests: it holds sets of every rank, which the service itself never builds.
 *
 * @throws Error naming the first rank that breaks one of these
 */
export function checkRanks(ranks: RankSource): void {
  const texts = new Set<string>();
  const binaries = new Set<string>();
  for (let rank = 0; rank < ranks.length; rank++) {
    const value = ranks[rank];
    if (value === undefined) continue;
    if (typeof value === "string") {
      if (!value.isWellFormed()) throw new Error(`rank ${rank} is not well-formed text`);
      if (texts.has(value)) throw new Error(`rank ${rank} repeats an earlier rank's text`);
      texts.add(value);
      continue;
    }
    const key = value.join(",");
    if (binaries.has(key)) throw new Error(`rank ${rank} repeats an earlier rank's bytes`);
    binaries.add(key);
  }
}

/**
 * Packs `ranks` (`gpt-tokenizer`'s `bpeRanks/o200k_base`, as {@linkcode checkRanks} accepts them)
 * into the packed form, writing each rank's bytes straight into one array; a rank given as bytes
 * that are valid UTF-8 is left empty, as `gpt-tokenizer` looks such bytes up among the text ranks.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const table = rankTable(indexRanks(packRanks(["a", "b", "ab", [0xff], [0x61, 0x62]])));
 * assert.equal(table.rankOf(new TextEncoder().encode("ab"), 0, 2), 2);
 * assert.equal(table.rankOf(new Uint8Array([0xff]), 0, 1), 3);
 * assert.equal(table.rankOf(new TextEncoder().encode("ba"), 0, 2), -1);
 * // Rank 4, "ab" as bytes, is never found: "ab" is rank 2.
 * assert.equal(table.rankOf(new Uint8Array([0x61, 0x62]), 0, 2), 2);
 * ```
 */
export function packRanks(ranks: RankSource): Uint8Array {
  const size = ranks.length;
  let most = 4 + size;
  for (let rank = 0; rank < size; rank++) most += 3 * (ranks[rank]?.length ?? 0);
  const packed = new Uint8Array(most);
  new DataView(packed.buffer).setUint32(0, size, true);
  let offset = 4 + size;
  for (let rank = 0; rank < size; rank++) {
    const value = ranks[rank];
    if (value === undefined) continue;
    let length: number;
    if (typeof value === "string") {
      length = encoder.encodeInto(value, packed.subarray(offset)).written;
    } else {
      // Bytes that are valid UTF-8 are looked up as text, among the text ranks: never this one.
      if (isUtf8(Uint8Array.from(value))) continue;
      packed.set(value, offset);
      length = value.length;
    }
    if (length > 255) throw new Error(`rank ${rank} is longer than 255 bytes`);
    packed[4 + rank] = length;
    offset += length;
  }
  return packed.slice(0, offset);
}

/** FNV-1a of `bytes[start..end)`: spreads the ranks' bytes evenly over the slots. */
function hashOf(bytes: Uint8Array, start: number, end: number): number {
  let hash = 0x811c9dc5;
  for (let i = start; i < end; i++) hash = Math.imul(hash ^ bytes[i]!, 0x01000193);
  return hash >>> 0;
}

/**
 * Indexes the packed form ({@linkcode packRanks}): the offset of each rank, and a hash table of
 * ranks at most half full.
 *
 * @throws Error when `packed` is shorter or longer than its lengths say
 */
export function indexRanks(packed: Uint8Array): IndexedRanks {
  const size = new DataView(packed.buffer, packed.byteOffset, 4).getUint32(0, true);
  const offsets = new Uint32Array(size + 1);
  offsets[0] = 4 + size;
  for (let rank = 0; rank < size; rank++) offsets[rank + 1] = offsets[rank]! + packed[4 + rank]!;
  if (offsets[size] !== packed.length) throw new Error("the packed ranks are not as long as said");
  let count = 1;
  while (count < size * 2) count *= 2;
  const mask = count - 1;
  const slots = new Int32Array(count);
  for (let rank = 0; rank < size; rank++) {
    const start = offsets[rank]!, end = offsets[rank + 1]!;
    if (start === end) continue;
    let slot = hashOf(packed, start, end) & mask;
    while (slots[slot] !== 0) slot = (slot + 1) & mask;
    slots[slot] = rank + 1;
  }
  return { packed, offsets, slots };
}

/** The lookup of indexed ranks. */
export function rankTable({ packed, offsets, slots }: IndexedRanks): RankTable {
  const mask = slots.length - 1;
  return {
    rankOf(bytes, start, end) {
      const length = end - start;
      for (let slot = hashOf(bytes, start, end) & mask;; slot = (slot + 1) & mask) {
        const entry = slots[slot]!;
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

/**
 * Frees the memory of `ranks` now, rather than at some later garbage collection: their buffers are
 * detached (every array of them is empty after), their storage returned at once.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const ranks = indexRanks(packRanks(["a", "b", "ab"]));
 * releaseRanks(ranks);
 * assert.equal(ranks.packed.length + ranks.offsets.length + ranks.slots.length, 0);
 * ```
 */
export function releaseRanks(ranks: IndexedRanks): void {
  for (const buffer of new Set([ranks.packed.buffer, ranks.offsets.buffer, ranks.slots.buffer])) {
    if (buffer instanceof ArrayBuffer && !buffer.detached) buffer.transfer(0);
  }
}

/** The first `u32` of the indexed form: "BPE2", read in the platform's byte order. */
const MAGIC = 0x32455042;
/** The header's `u32` fields. */
const HEADER = 6;

/**
 * The indexed form of `ranks`, their `split` pattern and the `known` counts of chunks
 * (`knownCounts()`), as one byte array.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const known = new Map([["abab", 2]]);
 * const bytes = indexedForm(indexRanks(packRanks(["a", "b", "ab"])), /[ab]+/gu, known);
 * const form = readIndexedForm(memoryReader(bytes));
 * assert.equal(form.table.rankOf(new TextEncoder().encode("ab"), 0, 2), 2);
 * assert.equal(form.split.flags, "gu");
 * assert.equal(knownCounts(form.known).get("abab"), 2);
 * ```
 */
export function indexedForm(
  ranks: IndexedRanks,
  split: SplitPattern,
  known: ReadonlyMap<string, number> = new Map(),
): Uint8Array {
  const pattern = encoder.encode(`${split.flags}/${split.source}`);
  const knownBytes = encoder.encode(knownText(known));
  const patternEnd = 4 * HEADER + Math.ceil(pattern.length / 4) * 4;
  const slotsAt = patternEnd + ranks.offsets.byteLength;
  const packedAt = slotsAt + ranks.slots.byteLength;
  const knownAt = packedAt + ranks.packed.length;
  const bytes = new Uint8Array(knownAt + knownBytes.length);
  new Uint32Array(bytes.buffer, 0, HEADER).set([
    MAGIC,
    ranks.offsets.length - 1,
    ranks.slots.length,
    ranks.packed.length,
    pattern.length,
    knownBytes.length,
  ]);
  bytes.set(pattern, 4 * HEADER);
  bytes.set(new Uint8Array(ranks.offsets.buffer), patternEnd);
  bytes.set(new Uint8Array(ranks.slots.buffer), slotsAt);
  bytes.set(ranks.packed, packedAt);
  bytes.set(knownBytes, knownAt);
  return bytes;
}

/** Counts of chunks known beforehand, by chunk (a `Map` is one). */
export interface KnownCounts {
  get(chunk: string): number | undefined;
}

/**
 * The counts of chunks a build counted (a JSON object of chunk to count, as the indexed form and
 * the build's module carry them), by chunk. Parsed as an object with no prototype rather than
 * copied into a `Map`: this runs once, cold, on the first Markdown response's way, where building a
 * `Map` of a thousand chunks took longer than the parse. A count that is not a positive integer is
 * not taken (the chunk is merged instead).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const known = knownCounts('{"abab":2,"toString":1,"x":"2"}');
 * assert.deepEqual([known.get("abab"), known.get("toString"), known.get("valueOf"), known.get("x")], [2, 1, undefined, undefined]);
 * ```
 *
 * @throws Error when `text` is no JSON object
 */
export function knownCounts(text: string): KnownCounts {
  const counts: unknown = JSON.parse(text);
  if (typeof counts !== "object" || counts === null || Array.isArray(counts)) {
    throw new Error("the known counts of chunks are not a JSON object of chunk to count");
  }
  const record = Object.setPrototypeOf(counts, null) as Record<string, unknown>;
  return {
    get(chunk) {
      const count = record[chunk];
      return typeof count === "number" && Number.isSafeInteger(count) && count > 0
        ? count
        : undefined;
    },
  };
}

/** The JSON text of `known` that {@linkcode knownCounts} reads. */
export function knownText(known: ReadonlyMap<string, number>): string {
  return JSON.stringify(Object.fromEntries(known));
}

/**
 * Random access to an indexed form's bytes (a file the platform opens, or memory): `read` returns
 * `length` bytes from `at`, in a buffer of their own.
 */
export interface FormReader {
  read(at: number, length: number): Uint8Array;
  /** Lets the bytes go (closes the file); the reader is not read again. */
  close(): void;
}

/** A {@linkcode FormReader} over bytes in memory. */
export function memoryReader(bytes: Uint8Array): FormReader {
  return { read: (at, length) => bytes.slice(at, at + length), close: () => {} };
}

/**
 * The rank table, split pattern and known counts of an indexed form read piece by piece: the
 * header, the pattern and the known counts at once, then only the slots, offsets and bytes that
 * lookups touch (a few hundred bytes for a chunk, where the whole form is 4.4 MB). The counter
 * needs the ranks only for the chunks the build did not count (those a configuration brings), so
 * the form is not read whole, and its memory not taken; text the build never saw (a `static/`
 * edited since, a body in other scripts) needs many lookups, and after {@linkcode PIECEMEAL_READS}
 * reads the rest of the form is read at once and looked up in memory, as fast as the ranks packed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const known = new Map([["abab", 2]]);
 * const bytes = indexedForm(indexRanks(packRanks(["a", "b", "ab"])), /[ab]+/gu, known);
 * const form = readIndexedForm(memoryReader(bytes));
 * assert.equal(form.table.rankOf(new TextEncoder().encode("ab"), 0, 2), 2);
 * assert.equal(form.table.rankOf(new TextEncoder().encode("ba"), 0, 2), -1);
 * assert.equal(form.split.source, "[ab]+");
 * assert.equal(knownCounts(form.known).get("abab"), 2);
 * ```
 *
 * @throws Error when the bytes are no indexed form of this version and byte order, or are cut
 *   short; its lookups throw when a read comes back short (the file cut since) or the table is
 *   not one (no empty slot, a rank out of range)
 */
export function readIndexedForm(
  reader: FormReader,
): { table: RankTable; split: SplitPattern; known: string } {
  const read = strictReads(reader);
  const form = layoutOf(reader, read);
  let reads = 0;
  let inMemory: RankTable | undefined;
  const piecemeal = piecemealTable(read, form, () => reads++);
  const slash = form.pattern.indexOf("/");
  return {
    table: {
      rankOf(bytes, start, end) {
        if (inMemory === undefined && reads > PIECEMEAL_READS) {
          const whole = read(0, form.knownAt);
          inMemory = rankTable({
            offsets: new Uint32Array(
              whole.buffer,
              whole.byteOffset + form.offsetsAt,
              form.size + 1,
            ),
            slots: new Int32Array(whole.buffer, whole.byteOffset + form.slotsAt, form.count),
            packed: whole.subarray(form.packedAt, form.knownAt),
          });
        }
        return (inMemory ?? piecemeal).rankOf(bytes, start, end);
      },
    },
    split: { source: form.pattern.slice(slash + 1), flags: form.pattern.slice(0, slash) },
    known: new TextDecoder().decode(form.known),
  };
}

/** Reads `length` bytes from `at`, all of them, or throws. */
type StrictRead = (at: number, length: number) => Uint8Array;

/** `reader`'s reads, a short one refused (the file cut since its index was read). */
function strictReads(reader: FormReader): StrictRead {
  return (at, length) => {
    const bytes = reader.read(at, length);
    if (bytes.length !== length) throw new Error("the indexed ranks are not as long as said");
    return bytes;
  };
}

/** `n` `u32` read from `at`. */
function u32(read: StrictRead, at: number, n: number): Uint32Array {
  const bytes = read(at, 4 * n);
  return new Uint32Array(bytes.buffer, bytes.byteOffset, n);
}

/** Where an indexed form's parts are, its pattern and its known counts' bytes. */
interface FormLayout {
  size: number;
  count: number;
  offsetsAt: number;
  slotsAt: number;
  packedAt: number;
  knownAt: number;
  pattern: string;
  known: Uint8Array;
}

/** The layout of the form `reader` reads, checked as far as reading a few bytes can. */
function layoutOf(reader: FormReader, read: StrictRead): FormLayout {
  const bytes = reader.read(0, 4 * HEADER);
  const header = bytes.length === 4 * HEADER
    ? new Uint32Array(bytes.buffer, bytes.byteOffset, HEADER)
    : undefined;
  if (header?.[0] !== MAGIC) {
    throw new Error(
      "not an indexed form of ranks of this version and byte order (deno task build:tokens writes it)",
    );
  }
  const [, size, count, packedLength, patternLength, knownLength] = header as unknown as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const pattern = new TextDecoder().decode(read(4 * HEADER, patternLength));
  const offsetsAt = 4 * HEADER + Math.ceil(patternLength / 4) * 4;
  const slotsAt = offsetsAt + 4 * (size + 1);
  const packedAt = slotsAt + 4 * count;
  const knownAt = packedAt + packedLength;
  const known = read(knownAt, knownLength);
  // The packed ranks open with their number (`packRanks`): read from the middle of the form, it
  // checks that the header says where they are, and that the reader can reach them (a platform's
  // file that reads its start and end but cannot seek fails here, not in the middle of a count).
  const packedSize = read(packedAt, 4);
  if (
    !pattern.includes("/") || count < 2 * size || count & (count - 1) ||
    new DataView(packedSize.buffer, packedSize.byteOffset).getUint32(0, true) !== size
  ) {
    throw new Error("the indexed ranks are not as long as said");
  }
  return { size, count, offsetsAt, slotsAt, packedAt, knownAt, pattern, known };
}

/** The lookup of a form's ranks read by `read` piece by piece; `onRead` is told of each read. */
function piecemealTable(read: StrictRead, form: FormLayout, onRead: () => void): RankTable {
  const { size, count, offsetsAt, slotsAt, packedAt } = form;
  const mask = count - 1;
  return {
    rankOf(bytes, start, end) {
      const length = end - start;
      // Linear probing reads on from the slot, a few slots at a time (most lookups need one); a
      // table has empty slots (twice the ranks), so the probe ends within `count` slots.
      let slot = hashOf(bytes, start, end) & mask;
      for (let probed = 0; probed < count;) {
        const run = Math.min(SLOTS_READ, count - slot);
        const entries = u32(read, slotsAt + 4 * slot, run);
        onRead();
        for (let i = 0; i < run; i++) {
          const entry = entries[i]!;
          if (entry === 0) return -1;
          if (entry > size) throw new Error("the indexed ranks' table names no rank");
          const [from, to] = u32(read, offsetsAt + 4 * (entry - 1), 2) as unknown as [
            number,
            number,
          ];
          onRead();
          if (to - from !== length) continue;
          const token = read(packedAt + from, length);
          onRead();
          let j = 0;
          while (j < length && token[j] === bytes[start + j]) j++;
          if (j === length) return entry - 1;
        }
        probed += run;
        slot = (slot + run) & mask;
      }
      throw new Error("the indexed ranks' table has no empty slot");
    },
  };
}

/**
 * Reads of a form looked up piece by piece after which the rest is read at once: about a
 * millisecond of reads (a configuration's chunks need a few hundred), where reading the whole form
 * takes three.
 */
export const PIECEMEAL_READS = 2_000;

/** Slots read at once by {@linkcode readIndexedForm}'s lookups. */
const SLOTS_READ = 4;
