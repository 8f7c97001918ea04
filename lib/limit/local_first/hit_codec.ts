/**
 * The packing of `local-first`'s hit batches (`LogBatch.hits`, `core/hit_log.ts`): a caller key and a
 * time per hit, compact, since every admitted hit of every instance goes through the shared log.
 *
 * A batch is a format byte, the first hit's time as a float64 (whole ms), then one record per hit:
 *
 * - a kind byte: 1 for a canonical IPv4 address (then its 4 bytes), 2 for a canonical IPv6 /64 key
 *   (then its 8 bytes), 3 for any other key (then its UTF-8 length as a varint and the bytes);
 * - the time minus the previous hit's, in whole ms, as a zigzag varint (one or two bytes while the
 *   hits of a batch are close in time; a time that stepped back costs nothing more).
 *
 * So an IPv4 hit is about 6 bytes and an IPv6 /64 hit 10, and a batch is decoded back to the same
 * key strings (only canonical spellings are packed as words: `parseCallerKey`). Times are rounded
 * to whole ms: less than a millisecond of a window is not worth a byte.
 *
 * @module
 */

import {
  KEY_IPV4,
  KEY_IPV6,
  KEY_OTHER,
  keyOfWords,
  parseCallerKey,
  type ParsedKey,
} from "../caller/caller_key.ts";

/** The format byte of a batch: a reader refuses another one (a newer format in a mixed fleet). */
const FORMAT = 1;
/** Bytes of the header: the format byte and the first time. */
const HEADER_BYTES = 9;
/** The longest key packed, in UTF-8 bytes; a longer one is not sent (no caller key is that long). */
export const MAX_KEY_BYTES = 1024;
/** The most bytes one hit takes: kind, a length varint, the key, a time varint. */
export const MAX_HIT_BYTES = 1 + 2 + MAX_KEY_BYTES + 10;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Packs hits into one batch of at most `capacity` bytes. */
export class HitWriter {
  readonly #bytes: Uint8Array;
  readonly #view: DataView;
  readonly #parsed: ParsedKey = { kind: 0, hi: 0, lo: 0 };
  #length = 0;
  #count = 0;
  #previous = 0;

  /** A writer of batches of at most `capacity` bytes (at least {@linkcode MAX_HIT_BYTES} more than the header). */
  constructor(capacity: number) {
    if (capacity < HEADER_BYTES + MAX_HIT_BYTES) {
      throw new RangeError(`a hit batch needs at least ${HEADER_BYTES + MAX_HIT_BYTES} bytes`);
    }
    this.#bytes = new Uint8Array(capacity);
    this.#view = new DataView(this.#bytes.buffer);
  }

  /** Hits packed since the last {@linkcode HitWriter.take}. */
  get count(): number {
    return this.#count;
  }

  /** Bytes packed since the last {@linkcode HitWriter.take}. */
  get length(): number {
    return this.#length;
  }

  /**
   * Packs one hit; false, packing nothing, when it does not fit (take the batch and start another),
   * or when the key is longer than {@linkcode MAX_KEY_BYTES} (it never fits).
   */
  append(key: string, time: number): boolean {
    const t = Math.round(time);
    const bytes = this.#bytes;
    const parsed = parseCallerKey(key, this.#parsed);
    let utf8: Uint8Array | undefined;
    let need = 1 + 10 + (parsed.kind === KEY_IPV4 ? 4 : 8);
    if (parsed.kind !== KEY_IPV4 && parsed.kind !== KEY_IPV6) {
      utf8 = encoder.encode(key);
      if (utf8.length > MAX_KEY_BYTES) return false;
      need = 1 + 2 + utf8.length + 10;
    }
    const start = this.#length === 0 ? HEADER_BYTES : this.#length;
    if (bytes.length - start < need) return false;
    if (this.#length === 0) {
      bytes[0] = FORMAT;
      this.#view.setFloat64(1, t);
      this.#previous = t;
    }
    let at = start;
    if (utf8 !== undefined) {
      bytes[at++] = KEY_OTHER;
      at = writeVarint(bytes, at, utf8.length);
      bytes.set(utf8, at);
      at += utf8.length;
    } else if (parsed.kind === KEY_IPV4) {
      bytes[at++] = KEY_IPV4;
      this.#view.setInt32(at, parsed.lo);
      at += 4;
    } else {
      bytes[at++] = KEY_IPV6;
      this.#view.setInt32(at, parsed.hi);
      this.#view.setInt32(at + 4, parsed.lo);
      at += 8;
    }
    const delta = t - this.#previous;
    at = writeVarint(bytes, at, delta >= 0 ? delta * 2 : -delta * 2 - 1);
    this.#previous = t;
    this.#length = at;
    this.#count++;
    return true;
  }

  /** The batch packed so far (a copy), and a fresh start. */
  take(): Uint8Array {
    const batch = this.#bytes.slice(0, this.#length);
    this.#length = 0;
    this.#count = 0;
    return batch;
  }
}

/**
 * Calls `each` with every hit of `batch`, in the order packed. Throws a `RangeError` on a batch it
 * cannot read (another format, cut short, a key longer than {@linkcode MAX_KEY_BYTES}, a time that is
 * not a finite number of ms): the caller drops the rest of it. A batch is written by another process
 * and read back from a shared store, so nothing in it is trusted: every length is checked against
 * the bytes there are, and no hit costs more than its bytes.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const writer = new HitWriter(4096);
 * writer.append("192.0.2.1", 1_700_000_000_000);
 * writer.append("2001:0db8:0000:0001::/64", 1_700_000_000_250);
 * const hits: Array<[string, number]> = [];
 * decodeHits(writer.take(), (key, t) => hits.push([key, t]));
 * assert.deepEqual(hits, [["192.0.2.1", 1_700_000_000_000], ["2001:0db8:0000:0001::/64", 1_700_000_000_250]]);
 * ```
 */
export function decodeHits(batch: Uint8Array, each: (key: string, time: number) => void): void {
  if (batch.length === 0) return;
  if (batch[0] !== FORMAT || batch.length < HEADER_BYTES) {
    throw new RangeError(`unknown hit batch format ${batch[0]}`);
  }
  const view = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
  let t = view.getFloat64(1);
  if (!Number.isSafeInteger(t)) throw new RangeError(`hit batch: a first time of ${t}`);
  let at = HEADER_BYTES;
  const cursor = { at: 0 };
  while (at < batch.length) {
    const kind = batch[at++];
    let key: string;
    if (kind === KEY_IPV4 && at + 4 <= batch.length) {
      key = keyOfWords(KEY_IPV4, 0, view.getUint32(at));
      at += 4;
    } else if (kind === KEY_IPV6 && at + 8 <= batch.length) {
      key = keyOfWords(KEY_IPV6, view.getUint32(at), view.getUint32(at + 4));
      at += 8;
    } else if (kind === KEY_OTHER) {
      cursor.at = at;
      const length = readVarint(batch, cursor);
      at = cursor.at;
      if (length > MAX_KEY_BYTES) throw new RangeError(`hit batch: a key of ${length} bytes`);
      if (at + length > batch.length) throw new RangeError("hit batch cut short");
      key = decoder.decode(batch.subarray(at, at + length));
      at += length;
    } else {
      throw new RangeError(`hit batch cut short or of an unknown kind ${kind}`);
    }
    cursor.at = at;
    const zigzag = readVarint(batch, cursor);
    at = cursor.at;
    t += zigzag % 2 === 0 ? zigzag / 2 : -(zigzag + 1) / 2;
    if (!Number.isSafeInteger(t)) throw new RangeError(`hit batch: a time of ${t}`);
    each(key, t);
  }
}

/** Writes a non-negative integer (below 2^53) as a little-endian base-128 varint; returns the end. */
function writeVarint(bytes: Uint8Array, at: number, value: number): number {
  while (value >= 128) {
    bytes[at++] = (value % 128) | 128;
    value = Math.floor(value / 128);
  }
  bytes[at++] = value;
  return at;
}

function readVarint(bytes: Uint8Array, cursor: { at: number }): number {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 8; i++) {
    if (cursor.at >= bytes.length) throw new RangeError("hit batch cut short");
    const byte = bytes[cursor.at++]!;
    value += (byte & 127) * scale;
    if (byte < 128) return value;
    scale *= 128;
  }
  throw new RangeError("hit batch: a varint too long");
}
