/**
 * The in-memory store's pooled sliding logs: the timestamps of callers with a few requests in the
 * window, held in typed-array chunks shared by all callers instead of one heap array each.
 *
 * A caller with several requests in the window (what a busy service has most of) kept a heap
 * `RunLog` of its own: about 200 bytes of array and backing store for a dozen timestamps, rewritten
 * as it grew and trimmed, which the collector copied, promoted and marked. Under a soak of 262,144
 * such callers the old generation held tens of megabytes of them and grew in steps to twice its
 * live size before each full collection: the process's peak was twice its steady state.
 *
 * Here each entry of the caller table may hold one segment: a ring of `2^k` float64 slots
 * (k = 2..8: 4 to 256 timestamps, absolute milliseconds, ascending from its head), taken from the
 * chunks of its size class. A log that fills its ring moves to the next class; one trimmed to a
 * quarter of its ring moves to the one below, so a log costs at most four times its live
 * timestamps and usually under two. A segment is always taken from the lowest chunk with room, and
 * within a chunk the last one freed or else the first never used, so the pages a class touches are
 * about as many as its busiest moment needed; no table is ever doubled or copied.
 *
 * A chunk is a little over 32 MiB of address space, of which only the pages written become
 * resident: glibc's `malloc` gives a block that large its own mapping, which the kernel fills with
 * zero pages as they are first touched, and unmaps it the moment it is freed. (Smaller blocks come
 * from the `malloc` heap once one large block has been freed, and freeing them gave nothing back:
 * measured, about 20 MiB stayed resident after every caller had left.) The sweep gives back the
 * empty chunks at the end of each class (`ArrayBuffer.prototype.transfer(0)` frees the memory at
 * once, not at the next full collection), off the request path. A log longer than the largest
 * ring (only above a limit of 256) is left to the caller, which keeps it as a heap `RunLog`.
 *
 * @module
 */

/**
 * Bytes of address space of one chunk of any class: above glibc's largest dynamic mmap threshold
 * (32 MiB on 64-bit), so that every chunk is its own mapping, touched page by page.
 */
const CHUNK_BYTES = 33 * 1024 * 1024;
/** Pages, for the accounting of what a chunk has touched. */
const PAGE_BYTES = 4096;
/** Slots of one chunk. */
const CHUNK_SLOTS = CHUNK_BYTES / 8;
/** The smallest ring, as a power of two (4 slots). */
const MIN_SHIFT = 2;
/** The largest ring, as a power of two (256 slots): longer logs are not pooled. */
const MAX_SHIFT = 8;
/** The most timestamps a pooled log holds. */
export const MAX_POOLED = 2 ** MAX_SHIFT;
/** No free segment in a chunk. */
const NONE = -1;

/** One size class: rings of `size` slots in chunks of {@linkcode CHUNK_BYTES}. */
class SizeClass {
  readonly size: number;
  /** Segments per chunk. */
  readonly per: number;
  readonly chunks: Array<Float64Array<ArrayBuffer>> = [];
  /** Per chunk: segments in use, the first free one (linked through slot 0), the first never used. */
  readonly #live: number[] = [];
  readonly #free: number[] = [];
  readonly #fresh: number[] = [];
  /** Bit `c` is set while chunk `c` has room. */
  readonly #room: number[] = [];

  constructor(shift: number) {
    this.size = 2 ** shift;
    this.per = CHUNK_SLOTS / this.size;
  }

  /** Takes a segment: its number (chunk x per + index). */
  take(): number {
    let c = this.#lowestWithRoom();
    if (c < 0) c = this.#addChunk();
    let s = this.#free[c]!;
    if (s !== NONE) this.#free[c] = this.chunks[c]![s * this.size]!;
    else s = this.#fresh[c]!++;
    if (++this.#live[c]! === this.per) this.#room[c >>> 5]! &= ~(1 << (c & 31));
    return c * this.per + s;
  }

  /** Gives segment `seg` back (its chunk stays until {@linkcode SizeClass.release}). */
  give(seg: number): void {
    const c = Math.floor(seg / this.per);
    const s = seg - c * this.per;
    this.chunks[c]![s * this.size] = this.#free[c]!;
    this.#free[c] = s;
    this.#live[c]!--;
    this.#room[c >>> 5]! |= 1 << (c & 31);
  }

  /** Bytes of the chunks' pages touched so far (segments ever used, whole pages). */
  get bytes(): number {
    let bytes = 0;
    for (const fresh of this.#fresh) {
      bytes += Math.ceil((fresh * this.size * 8) / PAGE_BYTES) * PAGE_BYTES;
    }
    return bytes;
  }

  #lowestWithRoom(): number {
    const room = this.#room;
    for (let w = 0; w < room.length; w++) {
      const bits = room[w]!;
      if (bits !== 0) return w * 32 + 31 - Math.clz32(bits & -bits);
    }
    return NONE;
  }

  #addChunk(): number {
    const c = this.chunks.length;
    this.chunks.push(new Float64Array(CHUNK_SLOTS));
    this.#live.push(0);
    this.#free.push(NONE);
    this.#fresh.push(0);
    while (this.#room.length <= c >>> 5) this.#room.push(0);
    this.#room[c >>> 5]! |= 1 << (c & 31);
    return c;
  }

  /** Frees the empty chunks at the end (segment numbers of the others stay as they are). */
  release(): void {
    while (this.chunks.length > 0 && this.#live.at(-1) === 0) {
      const c = this.chunks.length - 1;
      // Detaching frees the memory now; dropping the array alone would wait for a full collection.
      this.chunks.pop()!.buffer.transfer(0);
      this.#live.pop();
      this.#free.pop();
      this.#fresh.pop();
      this.#room[c >>> 5]! &= ~(1 << (c & 31));
    }
  }
}

/** What a {@linkcode LogPool} holds, for tests and operators. */
export interface LogPoolStats {
  /** Entries with a pooled log. */
  logs: number;
  /** Timestamps in pooled logs (some may have left the window but not yet been trimmed). */
  timestamps: number;
  /** Bytes of the chunks' pages touched, plus the per-entry bookkeeping of the entries used. */
  bytes: number;
}

/**
 * The pooled logs of a caller table's entries: entry `id`'s log is a ring in one size class.
 * An entry with no pooled log has count 0. The pool decides nothing: the store trims, reads and
 * appends through it.
 */
export class LogPool {
  /** The size classes, by shift from {@linkcode MIN_SHIFT} (4 slots) to {@linkcode MAX_SHIFT}. */
  readonly #classes: SizeClass[] = [];
  /** Per entry: its size class (shift, 0 for none), segment, ring head and count. */
  readonly #shift: Uint8Array;
  readonly #seg: Int32Array;
  readonly #head: Uint16Array;
  readonly #count: Uint16Array;
  #logs = 0;
  #timestamps = 0;
  /** Entries below this have been used (for the accounting of the per-entry arrays). */
  #top = 0;

  /** Creates a pool for entries `0 .. capacity - 1`. */
  constructor(capacity: number) {
    for (let shift = MIN_SHIFT; shift <= MAX_SHIFT; shift++) {
      this.#classes.push(new SizeClass(shift));
    }
    this.#shift = new Uint8Array(capacity);
    this.#seg = new Int32Array(capacity);
    this.#head = new Uint16Array(capacity);
    this.#count = new Uint16Array(capacity);
  }

  /** Timestamps in entry `id`'s pooled log (0: it has none). */
  count(id: number): number {
    return this.#count[id]!;
  }

  /** The oldest timestamp of entry `id`'s log (which must not be empty). */
  oldest(id: number): number {
    return this.#at(id, this.#shift[id]!, 0);
  }

  /** Starts entry `id`'s log with two timestamps, in either order. */
  start(id: number, a: number, b: number): void {
    this.#place(id, MIN_SHIFT);
    this.#write(id, 0, Math.min(a, b));
    this.#write(id, 1, Math.max(a, b));
    this.#count[id] = 2;
    this.#timestamps += 2;
    this.#logs++;
    if (id >= this.#top) this.#top = id + 1;
  }

  /**
   * Drops entry `id`'s timestamps at or before `cutoff`; frees its segment when none is left, and
   * moves it to a smaller ring when a quarter of its ring or less is left.
   *
   * @returns the timestamps left
   */
  trim(id: number, cutoff: number): number {
    const shift = this.#shift[id]!;
    const before = this.#count[id]!;
    let count = before;
    let i = 0;
    while (count > 0 && this.#at(id, shift, i) <= cutoff) {
      i++;
      count--;
    }
    const head = (this.#head[id]! + i) & ((1 << shift) - 1);
    if (count === before) return count;
    this.#timestamps -= before - count;
    this.#head[id] = head;
    this.#count[id] = count;
    if (count === 0) this.clear(id);
    else if (shift > MIN_SHIFT && count <= 1 << (shift - 2)) this.#move(id, shift - 1);
    return count;
  }

  /**
   * Appends `t` to entry `id`'s log, in order (a time older than the newest, from a clock that
   * stepped back, is inserted where it belongs), moving it to a larger ring when full.
   *
   * @returns false, changing nothing, when the log already holds {@linkcode MAX_POOLED}
   */
  push(id: number, t: number): boolean {
    let shift = this.#shift[id]!;
    const count = this.#count[id]!;
    if (count === 1 << shift) {
      if (shift === MAX_SHIFT) return false;
      this.#move(id, ++shift);
    }
    let i = count;
    while (i > 0 && this.#at(id, shift, i - 1) > t) {
      this.#write(id, i, this.#at(id, shift, i - 1));
      i--;
    }
    this.#write(id, i, t);
    this.#count[id] = count + 1;
    this.#timestamps++;
    return true;
  }

  /** Drops the oldest `n` timestamps of entry `id`'s log (fewer than it holds). */
  dropOldest(id: number, n: number): void {
    const mask = (1 << this.#shift[id]!) - 1;
    this.#head[id] = (this.#head[id]! + n) & mask;
    this.#count[id] = this.#count[id]! - n;
    this.#timestamps -= n;
  }

  /** Count and oldest time of entry `id`'s timestamps after `cutoff`, without changing the log. */
  liveAfter(id: number, cutoff: number): { count: number; oldest: number } {
    const shift = this.#shift[id]!;
    const count = this.#count[id]!;
    for (let i = 0; i < count; i++) {
      const t = this.#at(id, shift, i);
      if (t > cutoff) return { count: count - i, oldest: t };
    }
    return { count: 0, oldest: 0 };
  }

  /** Entry `id`'s timestamps, oldest first. */
  times(id: number): number[] {
    const shift = this.#shift[id]!;
    return Array.from({ length: this.#count[id]! }, (_, i) => this.#at(id, shift, i));
  }

  /** Frees entry `id`'s log, if it has one. */
  clear(id: number): void {
    if (this.#shift[id] === 0) return;
    this.#timestamps -= this.#count[id]!;
    this.#classes[this.#shift[id]! - MIN_SHIFT]!.give(this.#seg[id]!);
    this.#shift[id] = 0;
    this.#count[id] = 0;
    this.#logs--;
  }

  /**
   * Gives back the memory of the empty chunks at the end of each class: called by the sweep, so
   * that the request path never unmaps (nor maps again a moment later).
   */
  release(): void {
    for (const c of this.#classes) c.release();
  }

  /** Pooled logs, their timestamps, and the bytes they hold. */
  stats(): LogPoolStats {
    let bytes = this.#top * 9; // shift, segment, head and count of each entry used
    for (const c of this.#classes) bytes += c.bytes;
    return { logs: this.#logs, timestamps: this.#timestamps, bytes };
  }

  /** Entry `id`'s `i`-th oldest timestamp. */
  #at(id: number, shift: number, i: number): number {
    const cls = this.#classes[shift - MIN_SHIFT]!;
    const seg = this.#seg[id]!;
    const c = Math.floor(seg / cls.per);
    return cls
      .chunks[c]![((seg - c * cls.per) << shift) + ((this.#head[id]! + i) & (cls.size - 1))]!;
  }

  #write(id: number, i: number, t: number): void {
    const shift = this.#shift[id]!;
    const cls = this.#classes[shift - MIN_SHIFT]!;
    const seg = this.#seg[id]!;
    const c = Math.floor(seg / cls.per);
    cls.chunks[c]![((seg - c * cls.per) << shift) + ((this.#head[id]! + i) & (cls.size - 1))] = t;
  }

  /** Gives entry `id` a new, empty segment of class `shift` (head 0). */
  #place(id: number, shift: number): void {
    this.#shift[id] = shift;
    this.#seg[id] = this.#classes[shift - MIN_SHIFT]!.take();
    this.#head[id] = 0;
  }

  /** Moves entry `id`'s timestamps to a ring of class `shift`. */
  #move(id: number, shift: number): void {
    const times = this.times(id);
    const old = this.#shift[id]!;
    this.#classes[old - MIN_SHIFT]!.give(this.#seg[id]!);
    this.#place(id, shift);
    for (let i = 0; i < times.length; i++) this.#write(id, i, times[i]!);
  }
}
