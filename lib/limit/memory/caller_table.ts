/**
 * The in-memory store's table of callers: open addressing over typed arrays, sized once from the
 * cap on tracked callers, so that it never rehashes and keeps no heap object for a common caller.
 *
 * A `Map` of half a million callers rebuilt its whole table in one go whenever it grew or filled
 * with deleted entries (30-140 ms), and every entry was something for the collector to copy or
 * mark. Here a caller is a slot in parallel typed arrays (an entry): its key as two 32-bit words
 * (an IPv4 address as one, an IPv6 /64 as two, {@linkcode parseCallerKey}), its newest counted time
 * as a float64 (absolute milliseconds: no base time to move), and its place in the order callers
 * were added (a doubly linked list by entry number). An index of `2^k >= 2 x cap` slots, linear
 * probing, holds entry numbers; deletion shifts the following entries of a probe run back
 * (backward-shift deletion), so no tombstones build up and no pass ever rebuilds it. All arrays are
 * allocated at their full size up front: the operating system maps their zero pages only when first
 * written, so an idle table costs almost no resident memory. An entry is 25 bytes (touched as
 * entries are first used: the most callers held at once) and an index slot 4 bytes (8 to 16 bytes
 * per unit of the cap, touched all over once a few thousand callers have arrived).
 *
 * A caller with more than one request in the window keeps its timestamps in the table's
 * {@linkcode LogPool} (rings in shared typed-array chunks, no heap object of its own). Two kinds of
 * callers need the heap, both rare: a key that is neither a canonical IPv4 address nor a canonical
 * IPv6 /64 key (`unix`, tests' names) is held in a small `Map` beside the index, and a caller with
 * more requests in the window than the largest ring holds (only above a limit of 256) keeps a
 * {@linkcode RunLog} in a side array, in chunks allocated on first use.
 *
 * The index hash is seeded per table from `crypto.getRandomValues`, so that callers cannot choose
 * addresses that all probe one run.
 *
 * @module
 */

import { KEY_OTHER, parseCallerKey, type ParsedKey } from "../caller/caller_key.ts";
import { LogPool } from "./log_pool.ts";
import type { RunLog } from "./run_length_log.ts";

/** The index is at most this full: linear probing stays short (about 1.5 probes for a hit). */
const MAX_LOAD = 0.5;
/** Entries whose run logs one chunk of the side array holds. */
const LOG_CHUNK = 1024;
/** Bytes of one entry: time (8), key words (4 + 4), kind (1), insertion links (4 + 4). */
const ENTRY_BYTES = 25;
/** No entry: the end of the insertion list, an empty free list. */
const NONE = -1;

/** An entry with no caller: a free entry (the other kinds are the key's, `KEY_IPV4`...). */
const FREE = 0;

/** A 32-bit hash of two words under `seed` (MurmurHash3's mixing steps). */
function hashWords(hi: number, lo: number, seed: number): number {
  let h = seed ^ Math.imul(lo, 0xcc9e2d51);
  h = Math.imul((h << 13) | (h >>> 19), 5) + 0xe6546b64;
  h ^= Math.imul(hi, 0x1b873593);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

/** The smallest power of two at or above `n`. */
function powerOfTwoAtLeast(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/**
 * The table: at most `capacity` entries, each a caller with its newest time and optional run log.
 * It decides nothing: {@linkcode MemoryStore} does, and uses {@linkcode CallerTable.find},
 * {@linkcode CallerTable.add} and {@linkcode CallerTable.remove} with entry numbers.
 */
export class CallerTable {
  /** The most entries. */
  readonly capacity: number;
  /** The newest counted time of each entry, in ms (absolute, as the store was given it). */
  readonly time: Float64Array;
  /** The pooled logs of entries with more than one request (256 at most). */
  readonly logs: LogPool;
  readonly #hi: Int32Array;
  readonly #lo: Int32Array;
  readonly #kind: Uint8Array;
  /** Insertion order: the entry added before / after each one; `#next` links the free list too. */
  readonly #prev: Int32Array;
  readonly #next: Int32Array;
  /** The index: entry number + 1 per slot, 0 for an empty slot. */
  readonly #slots: Int32Array;
  readonly #mask: number;
  readonly #seed: number;
  /** Keys held by their string, and the string of each such entry. */
  readonly #others = new Map<string, number>();
  readonly #otherNames = new Map<number, string>();
  readonly #logs: Array<Array<RunLog | undefined>> = [];
  /** The key {@linkcode CallerTable.find} parsed last, for {@linkcode CallerTable.add}. */
  readonly #key: ParsedKey = { kind: 0, hi: 0, lo: 0 };
  #keyText = "";
  #head = NONE;
  #tail = NONE;
  #free = NONE;
  /** Entries below this have been used at least once; above it, pages never touched. */
  #top = 0;
  #size = 0;

  /** Creates a table for at most `capacity` callers. */
  constructor(capacity: number, seed: number = crypto.getRandomValues(new Int32Array(1))[0]!) {
    if (!(Number.isInteger(capacity) && capacity >= 1)) {
      throw new RangeError(`capacity must be a positive integer, got ${capacity}`);
    }
    this.capacity = capacity;
    this.time = new Float64Array(capacity);
    this.logs = new LogPool(capacity);
    this.#hi = new Int32Array(capacity);
    this.#lo = new Int32Array(capacity);
    this.#kind = new Uint8Array(capacity);
    this.#prev = new Int32Array(capacity);
    this.#next = new Int32Array(capacity);
    const slots = powerOfTwoAtLeast(Math.ceil(capacity / MAX_LOAD));
    this.#slots = new Int32Array(slots);
    this.#mask = slots - 1;
    this.#seed = seed;
  }

  /** Entries held now. */
  get size(): number {
    return this.#size;
  }

  /** Entry numbers in use lie below this (a sweep visits `0 .. top - 1`). */
  get top(): number {
    return this.#top;
  }

  /**
   * Bytes of the table's own arrays that entries have touched: 25 per entry used so far and the
   * whole index (4 bytes a slot: slots land all over it), not counting its pooled logs.
   */
  get bytes(): number {
    return this.#top * ENTRY_BYTES + this.#slots.length * 4;
  }

  /** Whether entry `id` holds a caller. */
  has(id: number): boolean {
    return this.#kind[id] !== FREE;
  }

  /**
   * The entry of `key`, or -1. Remembers the parsed key: an {@linkcode CallerTable.add} right after
   * a miss adds it without parsing again.
   */
  find(key: string): number {
    const parsed = parseCallerKey(key, this.#key);
    this.#keyText = key;
    if (parsed.kind === KEY_OTHER) return this.#others.get(key) ?? NONE;
    const { kind, hi, lo } = parsed;
    const mask = this.#mask;
    const slots = this.#slots;
    for (let i = hashWords(hi, lo, this.#seed) & mask;; i = (i + 1) & mask) {
      const slot = slots[i]!;
      if (slot === 0) return NONE;
      const id = slot - 1;
      if (this.#lo[id] === lo && this.#hi[id] === hi && this.#kind[id] === kind) return id;
    }
  }

  /**
   * Where `key` sits in the index: its home slot and the slot that holds it (-1 when absent or held
   * by its string), and the index's size. For tests and diagnostics.
   */
  probe(key: string): { home: number; slot: number; slots: number } {
    const { kind, hi, lo } = parseCallerKey(key);
    const slots = this.#slots.length;
    if (kind === KEY_OTHER) return { home: -1, slot: -1, slots };
    const home = hashWords(hi, lo, this.#seed) & this.#mask;
    const id = this.find(key);
    if (id < 0) return { home, slot: -1, slots };
    let slot = home;
    while (this.#slots[slot] !== id + 1) slot = (slot + 1) & this.#mask;
    return { home, slot, slots };
  }

  /**
   * Adds the key of the last {@linkcode CallerTable.find}, which must have missed, with one request
   * at `time`, as the newest in insertion order. The table must not be full.
   *
   * @returns its entry
   */
  add(time: number): number {
    if (this.#size >= this.capacity) throw new RangeError("the caller table is full");
    const id = this.#allocate();
    const { kind, hi, lo } = this.#key;
    this.#kind[id] = kind;
    this.#hi[id] = hi;
    this.#lo[id] = lo;
    this.time[id] = time;
    if (kind === KEY_OTHER) {
      this.#others.set(this.#keyText, id);
      this.#otherNames.set(id, this.#keyText);
    } else {
      const mask = this.#mask;
      let i = hashWords(hi, lo, this.#seed) & mask;
      while (this.#slots[i] !== 0) i = (i + 1) & mask;
      this.#slots[i] = id + 1;
    }
    this.#append(id);
    this.#size++;
    return id;
  }

  /** Forgets entry `id` (it must hold a caller). */
  remove(id: number): void {
    const kind = this.#kind[id];
    if (kind === KEY_OTHER) {
      this.#others.delete(this.#otherNames.get(id)!);
      this.#otherNames.delete(id);
    } else {
      this.#unindex(id);
    }
    this.logs.clear(id);
    this.setLog(id, undefined);
    this.#kind[id] = FREE;
    this.#unlink(id);
    this.#next[id] = this.#free;
    this.#free = id;
    this.#size--;
  }

  /** The entry added longest ago (least recently added), or -1 when the table is empty. */
  oldest(): number {
    return this.#head;
  }

  /** The heap run log of entry `id`, if its log outgrew the pool. */
  logOf(id: number): RunLog | undefined {
    return this.#logs[Math.floor(id / LOG_CHUNK)]?.[id % LOG_CHUNK];
  }

  /** Sets (or with `undefined` clears) the run log of entry `id`. */
  setLog(id: number, log: RunLog | undefined): void {
    const c = Math.floor(id / LOG_CHUNK);
    let chunk = this.#logs[c];
    if (chunk === undefined) {
      if (log === undefined) return;
      while (this.#logs.length < c) this.#logs.push(new Array(LOG_CHUNK).fill(undefined));
      chunk = new Array<RunLog | undefined>(LOG_CHUNK).fill(undefined);
      this.#logs[c] = chunk;
    }
    chunk[id % LOG_CHUNK] = log;
  }

  /** A free entry: the last one freed, else one never used. */
  #allocate(): number {
    if (this.#free === NONE) return this.#top++;
    const id = this.#free;
    this.#free = this.#next[id]!;
    return id;
  }

  #append(id: number): void {
    this.#prev[id] = this.#tail;
    this.#next[id] = NONE;
    if (this.#tail === NONE) this.#head = id;
    else this.#next[this.#tail] = id;
    this.#tail = id;
  }

  #unlink(id: number): void {
    const prev = this.#prev[id]!;
    const next = this.#next[id]!;
    if (prev === NONE) this.#head = next;
    else this.#next[prev] = next;
    if (next === NONE) this.#tail = prev;
    else this.#prev[next] = prev;
  }

  /**
   * Takes entry `id` out of the index, then shifts back each following entry of the probe run that
   * may move (its home slot is not between the hole and itself), so that every entry stays
   * reachable from its home slot with no tombstone left behind.
   */
  #unindex(id: number): void {
    const mask = this.#mask;
    const slots = this.#slots;
    let hole = hashWords(this.#hi[id]!, this.#lo[id]!, this.#seed) & mask;
    while (slots[hole] !== id + 1) hole = (hole + 1) & mask;
    for (let j = (hole + 1) & mask;; j = (j + 1) & mask) {
      const slot = slots[j]!;
      if (slot === 0) break;
      const home = hashWords(this.#hi[slot - 1]!, this.#lo[slot - 1]!, this.#seed) & mask;
      // The entry at j may fill the hole unless its home lies cyclically in (hole, j].
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        slots[hole] = slot;
        hole = j;
      }
    }
    slots[hole] = 0;
  }
}
