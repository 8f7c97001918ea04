/**
 * The shared hit log of `local-first` over Deno KV (`HitLog`): a local SQLite file that several
 * processes open (the VM recipe, `deno serve --parallel`), or Deno Deploy's database.
 *
 * Each batch is one entry under its writer's id and number, `[...prefix, "b", instance, seq]`, and
 * each writer has one entry in a registry, `[...prefix, "w", instance]`, holding the number of its
 * newest batch; a batch and its writer's registry entry are set in one atomic operation. A reader
 * keeps, per writer, the number of the next batch it has not read. An exchange commits `mine` while
 * it lists the registry (one round trip of time), then reads every other writer's batches from its
 * cursor to the number the registry gave: by key (`getMany`, ten keys a call, the calls at once)
 * when they are few, by a range `list` for a writer new to it (every batch of that writer still in
 * the database: that is the first exchange's replay) or far behind. Delivery depends on no clock:
 * the registry says which numbers exist, the atomic operation makes a batch visible no later than
 * its number, and a writer numbers its batches 0, 1, 2... sending one after the other, so a batch
 * is read once by every reader and a missing number at or below the registry's is one that expired.
 * Batches read in one exchange are returned in commit order (their versionstamps: KV's own order of
 * commits, one counter per database), each writer's in its own order.
 *
 * A batch sent again with the same number sets the same key: it is kept once, and a reader already
 * past that number does not read it again. Every entry expires (`expireIn`) a window plus
 * `marginMs` after it was written, so the database holds about a window and a margin of batches;
 * SQLite deletes expired entries when a process opens the file and then at the earliest expiry it
 * knows of (at most a minute later), Deno Deploy some time after, so a replay may return batches a
 * little older than that: they carry their hits' times and the replica drops what left the window.
 *
 * Nothing in the database is trusted (another process, or another app, may have written it): a value
 * that is not bytes is skipped and counted (`health`); a reader moves its cursor only past batches it
 * found, one after the other from the first it found (the ones before it expired), never to a number
 * the registry names with no batch there, nor past a gap or above the registry's number (a batch set
 * under another writer's id at a far number): so an entry that is not a writer's cannot silence it,
 * and each such sign is counted (`tampered`). A replay reads at most {@linkcode REPLAY_BATCHES}
 * batches of a writer per exchange (`more`: the rest is the next's), so start-up memory is bounded
 * by that chunk, not by the log.
 *
 * Deno KV needs `--unstable-kv` (set in deno.json's `unstable`).
 *
 * @module
 */

import type { HitLog, LogBatch, LogHealth } from "../core/hit_log.ts";

/**
 * The largest batch: Deno KV caps a value at 65,536 bytes; batches are stored as raw bytes, and 4
 * KiB is left so that no change of how a value is counted can make a full batch fail.
 */
export const KV_MAX_BATCH_BYTES = 60 * 1024;

/**
 * The default margin past the window an entry lives: covers the clocks of the processes sharing a
 * SQLite file disagreeing by a few seconds (each stamps the expiry of what it writes by its own).
 */
export const KV_HIT_LOG_MARGIN_MS = 10_000;

/** Above this many missing numbers of one writer, a reader lists the range instead of `getMany`. */
const GET_MANY_MAX_SPAN = 20;

/** Deno KV's most keys in one `getMany`. */
const GET_MANY_KEYS = 10;

/** Entries a `list` page reads; registry entries are small, batches at most 64 KiB. */
const LIST_PAGE = 100;

/**
 * Batches of one writer one exchange reads at most by a `list` (a replay, a reader far behind):
 * about 3.8 MiB; the rest waits for the next exchange (`more`).
 */
export const REPLAY_BATCHES = 64;

/** The longest instance id: keys are at most 2 KiB. */
const MAX_INSTANCE_LENGTH = 256;

/**
 * A writer absent from the registry this long (by the monotonic clock) past the window and margin
 * has its cursor forgotten: by then SQLite has deleted its batches (it runs the deletion at least
 * every minute), so a writer that comes back under the same id is not read twice.
 */
const FORGET_AFTER_MS = 120_000;

/** Options of {@linkcode KvHitLog}. */
export interface KvHitLogOptions {
  /** This instance's id: unique per process (a restarted process takes a new one). */
  instance: string;
  /** Key prefix of the log (default `["hit_log"]`). */
  prefix?: Deno.KvKey;
  /** How long past the window an entry lives, in ms (default {@linkcode KV_HIT_LOG_MARGIN_MS}). */
  marginMs?: number;
  /** Close the database with the log (default false: whoever opened it closes it). */
  ownsKv?: boolean;
  /** A monotonic clock in ms, only to forget writers long gone (default `performance.now`). */
  monotonicNow?: () => number;
}

interface Cursor {
  /** The number of the next batch this reader has not read. */
  next: number;
  /** When the writer was last seen in the registry, by the monotonic clock. */
  seenAt: number;
  /** When it last moved (or was made), by the monotonic clock. */
  movedAt: number;
}

interface ReadBatch {
  batch: LogBatch;
  versionstamp: string;
}

/** A batch's place in the log: its writer and number. */
interface BatchKey {
  instance: string;
  seq: number;
}

/** What one writer's reading found: its batches in order, and where its cursor goes next. */
interface WriterRead {
  instance: string;
  batches: ReadBatch[];
  /** Whether the read stopped at its bound with batches left. */
  more?: boolean;
}

/**
 * The hit log over Deno KV.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const kv = await Deno.openKv(":memory:");
 * const a = new KvHitLog(kv, 60_000, { instance: "a" });
 * const b = new KvHitLog(kv, 60_000, { instance: "b" });
 * await a.exchange({ instance: "a", seq: 0, hits: new Uint8Array([1, 2, 3]) });
 * const [batch] = await b.exchange(null);
 * assert.deepEqual([batch?.instance, batch?.seq, [...batch!.hits]], ["a", 0, [1, 2, 3]]);
 * assert.deepEqual(await b.exchange(null), []);
 * kv.close();
 * ```
 */
export class KvHitLog implements HitLog {
  /** {@inheritDoc HitLog.maxBatchBytes} */
  readonly maxBatchBytes = KV_MAX_BATCH_BYTES;
  readonly #kv: Deno.Kv;
  readonly #instance: string;
  readonly #prefix: Deno.KvKey;
  readonly #expireIn: number;
  readonly #ownsKv: boolean;
  readonly #now: () => number;
  readonly #cursors = new Map<string, Cursor>();
  #inFlight = false;
  #roundTrips = 0;
  #more = false;
  readonly #health: LogHealth = {
    unreadable: 0,
    unreadableReason: "",
    tampered: 0,
    tamperedReason: "",
  };

  /** Creates the log of `options.instance` over an open database, for a window of `windowMs`. */
  constructor(kv: Deno.Kv, windowMs: number, options: KvHitLogOptions) {
    if (!(windowMs > 0)) throw new RangeError("the window must be a positive number of ms");
    const marginMs = options.marginMs ?? KV_HIT_LOG_MARGIN_MS;
    if (!(marginMs >= 0)) throw new RangeError("the margin must be a number of ms, at least 0");
    checkInstance(options.instance);
    this.#kv = kv;
    this.#instance = options.instance;
    this.#prefix = options.prefix ?? ["hit_log"];
    this.#expireIn = windowMs + marginMs;
    this.#ownsKv = options.ownsKv ?? false;
    this.#now = options.monotonicNow ?? (() => performance.now());
  }

  /** {@inheritDoc HitLog.roundTrips} */
  get roundTrips(): number {
    return this.#roundTrips;
  }

  /** {@inheritDoc HitLog.more} */
  get more(): boolean {
    return this.#more;
  }

  /** {@inheritDoc HitLog.health} */
  get health(): LogHealth {
    return this.#health;
  }

  /**
   * {@inheritDoc HitLog.exchange}
   *
   * Two round trips of time: the commit of `mine` and a `list` of the registry at once, then the
   * reads of the new batches at once (one `getMany` per ten batches; a `list` per writer new to
   * this reader, paged by 100). Nothing new to read: one round trip. If any step fails, the
   * exchange throws and this reader's cursors stay where they were: the next exchange reads the
   * same batches again, and `mine` may be sent again with its number.
   */
  async exchange(mine: LogBatch | null): Promise<LogBatch[]> {
    if (mine !== null) this.#checkMine(mine);
    // Two at once would read the same batches twice: the sync never starts one with one in flight.
    if (this.#inFlight) throw new Error("the hit log takes one exchange at a time");
    this.#inFlight = true;
    try {
      const [, registry] = await Promise.all([
        mine === null ? undefined : this.#append(mine),
        this.#registry(),
      ]);
      const reads = await this.#read(registry);
      this.#advance(registry, reads);
      this.#more = reads.some((read) => read.more === true);
      return mergeByCommit(reads);
    } finally {
      this.#inFlight = false;
    }
  }

  /**
   * Moves the cursors past what was read (each only past batches found one after the other: see
   * `#accepted`), and forgets writers long gone from the registry.
   */
  #advance(registry: ReadonlyMap<string, number>, reads: readonly WriterRead[]): void {
    const now = this.#now();
    for (const read of reads) {
      const cursor = this.#cursors.get(read.instance);
      read.batches = this.#accepted(read, registry.get(read.instance), cursor, now);
      const last = read.batches.at(-1)?.batch.seq;
      this.#cursors.set(
        read.instance,
        last === undefined
          ? { next: cursor?.next ?? 0, seenAt: now, movedAt: cursor?.movedAt ?? now }
          : { next: last + 1, seenAt: now, movedAt: now },
      );
    }
    for (const [instance, cursor] of this.#cursors) {
      if (registry.has(instance)) cursor.seenAt = now;
      else if (now - cursor.seenAt > this.#expireIn + FORGET_AFTER_MS) {
        this.#cursors.delete(instance);
      }
    }
  }

  /** {@inheritDoc HitLog.close} */
  close(): void {
    if (this.#ownsKv) this.#kv.close();
  }

  #checkMine(mine: LogBatch): void {
    if (mine.instance !== this.#instance) {
      throw new RangeError(
        `this log appends the batches of ${this.#instance}, not ${mine.instance}`,
      );
    }
    if (!Number.isSafeInteger(mine.seq) || mine.seq < 0) {
      throw new RangeError(`a batch's number is an integer from 0, not ${mine.seq}`);
    }
    if (mine.hits.length > this.maxBatchBytes) {
      throw new RangeError(
        `a batch holds at most ${this.maxBatchBytes} bytes, not ${mine.hits.length}`,
      );
    }
  }

  /** Sets the batch and its writer's registry entry in one atomic operation. */
  async #append(mine: LogBatch): Promise<void> {
    this.#roundTrips++;
    const result = await this.#kv.atomic()
      .set([...this.#prefix, "b", mine.instance, mine.seq], mine.hits, { expireIn: this.#expireIn })
      .set([...this.#prefix, "w", mine.instance], mine.seq, { expireIn: this.#expireIn })
      .commit();
    // No check in the operation, so only a failure to commit at all can land here.
    if (!result.ok) throw new Error("the hit log's append was not committed");
  }

  /** The other writers in the registry, with the number of each one's newest batch. */
  async #registry(): Promise<Map<string, number>> {
    const writers = new Map<string, number>();
    let entries = 0;
    for await (
      const entry of this.#kv.list<unknown>(
        { prefix: [...this.#prefix, "w"] },
        { batchSize: LIST_PAGE * 10 },
      )
    ) {
      entries++;
      const instance = entry.key[entry.key.length - 1];
      if (typeof instance !== "string" || instance === this.#instance) continue;
      if (
        typeof entry.value === "number" && Number.isSafeInteger(entry.value) && entry.value >= 0
      ) {
        writers.set(instance, entry.value);
      } else {
        this.#unreadable("a registry entry that is not a batch number");
      }
    }
    this.#roundTrips += pagesOf(entries, LIST_PAGE * 10);
    return writers;
  }

  /**
   * What this exchange reads, one read per writer: a `list` for a writer new to this reader or far
   * behind, and for the others their wanted numbers by `getMany`, ten keys a call whoever's they are.
   */
  async #read(registry: Map<string, number>): Promise<WriterRead[]> {
    const lists: Promise<WriterRead>[] = [];
    // Every writer read by number has a read, found batches or none: its cursor is seen.
    const reads: WriterRead[] = [];
    const wanted: BatchKey[] = [];
    for (const [instance, newest] of registry) {
      const cursor = this.#cursors.get(instance);
      if (cursor === undefined) {
        lists.push(this.#listFrom(instance, 0, newest));
      } else if (newest >= cursor.next) {
        if (newest - cursor.next >= GET_MANY_MAX_SPAN) {
          lists.push(this.#listFrom(instance, cursor.next, newest));
        } else {
          reads.push({ instance, batches: [] });
          for (let seq = cursor.next; seq <= newest; seq++) wanted.push({ instance, seq });
        }
      }
    }
    const gets: Promise<WriterRead[]>[] = [];
    for (let i = 0; i < wanted.length; i += GET_MANY_KEYS) {
      gets.push(this.#getMany(wanted.slice(i, i + GET_MANY_KEYS)));
    }
    const [listed, got] = await Promise.all([Promise.all(lists), Promise.all(gets)]);
    return joined([...listed, ...reads, ...got.flat()]);
  }

  /**
   * The batches of `instance` from number `from` to `newest` (the registry's), at most
   * {@linkcode REPLAY_BATCHES} of them (`more` when it stopped there).
   */
  async #listFrom(instance: string, from: number, newest: number): Promise<WriterRead> {
    const batches: ReadBatch[] = [];
    let entries = 0;
    let more = false;
    const key = [...this.#prefix, "b", instance];
    for await (
      const entry of this.#kv.list<unknown>(
        { start: [...key, from], end: [...key, newest + 1] },
        { batchSize: Math.min(LIST_PAGE, REPLAY_BATCHES) },
      )
    ) {
      if (entries++ === REPLAY_BATCHES) {
        more = true;
        break;
      }
      const seq = entry.key[entry.key.length - 1];
      if (typeof seq !== "number" || !(entry.value instanceof Uint8Array)) {
        this.#unreadable("a batch entry whose value is not bytes");
        continue;
      }
      batches.push({
        batch: { instance, seq, hits: entry.value },
        versionstamp: entry.versionstamp,
      });
    }
    this.#roundTrips += pagesOf(entries, Math.min(LIST_PAGE, REPLAY_BATCHES));
    return { instance, batches, more };
  }

  /**
   * The batches of one writer a reader takes, in order: from the first found, one after the
   * other. A writer numbers its batches 0, 1, 2... and sends the next only once the last is
   * committed, so the only gap is before the first found (those expired); a gap after it, or a
   * registry naming a number no batch has, is an entry that writer did not write, counted as such.
   * A gap before the first found is taken only once the batch the cursor waits for could have
   * expired (its cursor has not moved for the entries' lifetime): before, it is a batch set under
   * that writer's id at a far number, and nothing is taken.
   */
  #accepted(
    read: WriterRead,
    newest: number | undefined,
    cursor: Cursor | undefined,
    now: number,
  ): ReadBatch[] {
    const instance = read.instance;
    const ordered = read.batches.toSorted((x, y) => x.batch.seq - y.batch.seq);
    const first = ordered[0]?.batch.seq;
    if (
      cursor !== undefined && first !== undefined && first > cursor.next &&
      now - cursor.movedAt < this.#expireIn
    ) {
      this.#tampered(
        `writer ${instance}'s batches skip from ${cursor.next} to ${first}, before any could expire: not read`,
      );
      return [];
    }
    let end = 0;
    while (
      end < ordered.length &&
      (end === 0 || ordered[end]!.batch.seq === ordered[end - 1]!.batch.seq + 1)
    ) end++;
    if (end < ordered.length) {
      this.#tampered(
        `writer ${instance}'s batches skip numbers: the ones past the gap are not read`,
      );
    } else if (
      read.more !== true && newest !== undefined && ordered.length > 0 &&
      ordered.at(-1)!.batch.seq < newest
    ) {
      this.#tampered(`writer ${instance}'s registry names batch ${newest}, which is not there`);
    }
    return ordered.slice(0, end);
  }

  #unreadable(reason: string): void {
    this.#health.unreadable++;
    this.#health.unreadableReason = reason;
  }

  #tampered(reason: string): void {
    this.#health.tampered++;
    this.#health.tamperedReason = reason;
  }

  /**
   * One `getMany` of up to ten batches (of one or several writers): a read of one batch for each
   * found. A missing number at or below the registry's newest expired: there is nothing to wait for.
   */
  async #getMany(keys: readonly BatchKey[]): Promise<WriterRead[]> {
    this.#roundTrips++;
    const entries = await this.#kv.getMany<unknown[]>(
      keys.map(({ instance, seq }) => [...this.#prefix, "b", instance, seq]),
    );
    const reads: WriterRead[] = [];
    for (const [i, { instance, seq }] of keys.entries()) {
      const entry = entries[i]!;
      if (entry.versionstamp === null) continue;
      if (!(entry.value instanceof Uint8Array)) {
        this.#unreadable("a batch entry whose value is not bytes");
        continue;
      }
      const batch = { instance, seq, hits: entry.value };
      reads.push({ instance, batches: [{ batch, versionstamp: entry.versionstamp }] });
    }
    return reads;
  }
}

/** Throws when `instance` cannot name a writer. */
function checkInstance(instance: string): void {
  if (
    typeof instance !== "string" || instance.length === 0 || instance.length > MAX_INSTANCE_LENGTH
  ) {
    throw new RangeError(`an instance id is 1 to ${MAX_INSTANCE_LENGTH} characters`);
  }
}

/** Requests a `list` of `entries` took: a page, and one more when the last page came back full. */
function pagesOf(entries: number, page: number): number {
  return Math.floor(entries / page) + 1;
}

/** Joins the reads of one writer (a `getMany` answers one batch each) into one read per writer. */
function joined(reads: readonly WriterRead[]): WriterRead[] {
  const perWriter = new Map<string, WriterRead>();
  for (const read of reads) {
    const known = perWriter.get(read.instance);
    if (known === undefined) perWriter.set(read.instance, { ...read, batches: [...read.batches] });
    else {
      known.batches.push(...read.batches);
      if (read.more === true) known.more = true;
    }
  }
  return [...perWriter.values()];
}

/**
 * Merges every writer's batches (one read per writer, in its own order) by commit order
 * (versionstamp), keeping each writer's own order.
 */
function mergeByCommit(reads: readonly WriterRead[]): LogBatch[] {
  const queues = reads.map((read) => read.batches);
  const merged: LogBatch[] = [];
  const heads = queues.map(() => 0);
  for (;;) {
    let best = -1;
    for (let q = 0; q < queues.length; q++) {
      const head = queues[q]![heads[q]!];
      if (head === undefined) continue;
      if (best < 0 || head.versionstamp < queues[best]![heads[best]!]!.versionstamp) best = q;
    }
    if (best < 0) return merged;
    merged.push(queues[best]![heads[best]!]!.batch);
    heads[best]!++;
  }
}

/**
 * The log of `instance` over the Deno KV database at `path` (`Deno.openKv()`'s default when
 * undefined), which it owns and closes.
 */
export async function openKvHitLog(
  path: string | undefined,
  windowMs: number,
  instance: string,
): Promise<KvHitLog> {
  return new KvHitLog(await Deno.openKv(path), windowMs, { instance, ownsKv: true });
}
