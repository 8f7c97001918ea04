/**
 * The shared hit log of `local-first` over one SQLite file (`node:sqlite`, built into Node 22.13+
 * and Deno 2), for several processes on one machine: the VM recipe on Node, where Deno KV's file is
 * not available. No dependency, no server.
 *
 * One table, `hit_log`: a row per batch, its id (`AUTOINCREMENT`: commit order, never reused, so a
 * reader's cursor is one number), the writer's id and batch number (`UNIQUE`: a batch sent again
 * after a failed exchange is kept once), the time it was appended by the writer's wall clock (for
 * trimming and the first exchange's replay only), and the hits. SQLite serialises writers, so a row
 * is visible only once every row with a lower id is: a reader that read up to id `n` has missed
 * nothing below it. The file runs in WAL mode (readers never wait for the writer, nor it for them)
 * with `synchronous=NORMAL` (a commit survives the process being killed, not a power cut: a power
 * cut loses at most the last hits, which is what the limit's bound already allows for).
 *
 * `node:sqlite` is synchronous: an exchange blocks the event loop for its transaction (a few tens of
 * microseconds, measured in tests/bench/README.md), and for at most {@linkcode SQLITE_BUSY_TIMEOUT_MS}
 * while another process holds the write lock; a longer wait fails the exchange, which the sync
 * retries at its next interval. So no request waits longer than that for the log.
 *
 * An exchange that appends also trims, at most once a second, at most {@linkcode TRIM_ROWS} rows at
 * once: the rows it had read or passed over a window and the margin ago by its monotonic clock, that
 * were appended that long ago by its wall clock too. So a trimmer deletes no row younger than that
 * in real time, whatever the clocks say: every reader (syncing far more often) has read it, and its
 * hits have left every window. One instance alone keeps its file to about a window of its own rows;
 * a peer whose wall clock is far behind holds back none of the others' trimming, and one far ahead
 * deletes nothing early (Deno KV's expiry, by each process's wall clock, would).
 *
 * Nothing in the file is trusted (another process, or another program, may have written it): a row
 * whose fields are not of their types, or whose hits are larger than a batch, is skipped and counted
 * (`health`), and the cursor moves past it; each exchange reads at most {@linkcode EXCHANGE_ROWS}
 * rows (`more`: the rest is the next's), so a replay of a huge log is held one chunk at a time; a
 * batch refused as a duplicate the first time it was sent (a row set under this writer's id and the
 * number it sends next) is counted as tampering. Rows stamped ahead of this instance's clock are
 * returned like the others: the hits carry their own times, which the local-first store clamps.
 *
 * @module
 */

import { statSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { DatabaseSync, type StatementSync } from "node:sqlite";
import type { HitLog, LogBatch, LogHealth } from "../core/hit_log.ts";
import { SQLITE_OPEN_FAILURE } from "./open_failure.ts";

/** The largest batch, as for Deno KV: rows stay within SQLite's default page overflow chains. */
export const SQLITE_MAX_BATCH_BYTES = 60 * 1024;

/** How long past the window a row stays: covers processes' clocks disagreeing by a few seconds. */
export const SQLITE_HIT_LOG_MARGIN_MS = 10_000;

/** Rows one exchange reads at most: about 3.8 MiB of full batches; the rest is the next's. */
export const EXCHANGE_ROWS = 64;

/**
 * The longest an exchange waits for another process's write lock, in ms. `node:sqlite` blocks the
 * event loop while it waits, so this is short; a write transaction here takes well under a ms.
 */
export const SQLITE_BUSY_TIMEOUT_MS = 100;

/** The longest the opening waits for another process's lock, in ms (start-up, not a request). */
const OPEN_BUSY_TIMEOUT_MS = 5_000;

/**
 * How long the opening pauses before it tries again a switch to WAL that SQLite refused at once, in
 * ms: a few times what the other process's switch takes (under a ms), at start-up only.
 */
const OPEN_RETRY_MS = 10;

/**
 * The write-ahead log's pages after which a commit copies them into the file (SQLite's default is
 * 1,000, 4 MiB): that copy runs in the committing exchange, on the event loop. 100 pages keep it a
 * few ms (600 appends of 60 KiB, each beside a read: p99 5.0 ms and the longest 6.9 ms, against
 * 11.2 ms and 15.6 ms with the default; the median 0.25 ms against 0.17 ms).
 */
const WAL_CHECKPOINT_PAGES = 100;

/** Trim the log at most this often per process, in ms. */
const TRIM_EVERY_MS = 1_000;

/** Rows one trim deletes at most, so that a trim of a huge log holds the write lock briefly. */
const TRIM_ROWS = 2_000;

/** The longest instance id, as for Deno KV. */
const MAX_INSTANCE_LENGTH = 256;

/** The largest id or number JavaScript holds exactly; a row beyond it is not read. */
const MAX_SAFE = Number.MAX_SAFE_INTEGER;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS hit_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  instance TEXT NOT NULL,
  seq INTEGER NOT NULL,
  at INTEGER NOT NULL,
  hits BLOB NOT NULL,
  UNIQUE (instance, seq)
);
CREATE INDEX IF NOT EXISTS hit_log_at ON hit_log (at);
`;

/**
 * A row as read: every field checked in SQL (a field of the wrong type or out of range reads as
 * null), and the hits not loaded when they are larger than a batch.
 */
const READ_COLUMNS = `id,
  CASE WHEN typeof(instance) = 'text' AND length(instance) BETWEEN 1 AND ${MAX_INSTANCE_LENGTH}
    THEN instance END AS instance,
  CASE WHEN typeof(seq) = 'integer' AND seq BETWEEN 0 AND ${MAX_SAFE} THEN seq END AS seq,
  CASE WHEN typeof(hits) = 'blob' AND length(hits) <= ${SQLITE_MAX_BATCH_BYTES}
    THEN hits END AS hits`;

/** Options of {@linkcode SqliteHitLog}. */
export interface SqliteHitLogOptions {
  /** This instance's id: unique per process (a restarted process takes a new one). */
  instance: string;
  /** How long past the window a row stays, in ms (default {@linkcode SQLITE_HIT_LOG_MARGIN_MS}). */
  marginMs?: number;
  /** The wall clock, ms since the epoch, that stamps and trims rows (default `Date.now`). */
  now?: () => number;
  /** A monotonic clock in ms, that times the trimming (default `performance.now`). */
  monotonicNow?: () => number;
  /** The busy timeout, in ms (default {@linkcode SQLITE_BUSY_TIMEOUT_MS}). */
  busyTimeoutMs?: number;
}

interface Row {
  id: number;
  instance: string | null;
  seq: number | null;
  hits: Uint8Array | null;
}

/**
 * The hit log over a SQLite file.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const a = SqliteHitLog.open(":memory:", 60_000, { instance: "a" });
 * await a.exchange({ instance: "a", seq: 0, hits: new Uint8Array([1, 2, 3]) });
 * assert.deepEqual(await a.exchange(null), []);
 * a.close();
 * ```
 */
export class SqliteHitLog implements HitLog {
  /** {@inheritDoc HitLog.maxBatchBytes} */
  readonly maxBatchBytes = SQLITE_MAX_BATCH_BYTES;
  readonly #db: DatabaseSync;
  readonly #instance: string;
  readonly #keepMs: number;
  readonly #now: () => number;
  readonly #insert: StatementSync;
  readonly #readFrom: StatementSync;
  readonly #replayFrom: StatementSync;
  readonly #trim: StatementSync;
  readonly #newest: StatementSync;
  /** The id of the last row read or passed over (this instance's own): the trim's bound too. */
  #cursor = 0;
  /** Whether the first exchange's replay (rows of the last window only) is still being read. */
  #replaying = true;
  /** The number of the last batch sent, to tell a batch sent again from one refused at once. */
  #lastSent = -1;
  #trimmedAt = -Infinity;
  /** The cursor by the monotonic clock, once a second at most: what may be trimmed a window later. */
  readonly #marks: { at: number; cursor: number }[] = [];
  readonly #monotonic: () => number;
  #roundTrips = 0;
  #more = false;
  readonly #health: LogHealth = {
    unreadable: 0,
    unreadableReason: "",
    tampered: 0,
    tamperedReason: "",
  };

  /**
   * Opens (creating when missing) the file at `path` and its table, in WAL mode. Throws what SQLite
   * throws when the file cannot be opened or is not a database.
   */
  static open(path: string, windowMs: number, options: SqliteHitLogOptions): SqliteHitLog {
    const db = new DatabaseSync(path);
    try {
      const busy = options.busyTimeoutMs ?? SQLITE_BUSY_TIMEOUT_MS;
      if (!Number.isSafeInteger(busy) || busy < 0) throw new RangeError("bad busy timeout");
      // Set first, and longer than the exchanges' wait: at start-up another process may be
      // creating the table or switching the file to WAL (which the file then keeps).
      db.exec(`PRAGMA busy_timeout = ${Math.max(busy, OPEN_BUSY_TIMEOUT_MS)}`);
      switchToWal(db);
      db.exec("PRAGMA synchronous = NORMAL");
      db.exec(`PRAGMA wal_autocheckpoint = ${WAL_CHECKPOINT_PAGES}`);
      db.exec(SCHEMA);
      db.exec(`PRAGMA busy_timeout = ${busy}`);
      return new SqliteHitLog(db, windowMs, options);
    } catch (error) {
      db.close();
      throw error;
    }
  }

  /** Creates the log of `options.instance` over an open database, for a window of `windowMs`. */
  constructor(db: DatabaseSync, windowMs: number, options: SqliteHitLogOptions) {
    if (!(windowMs > 0)) throw new RangeError("the window must be a positive number of ms");
    const marginMs = options.marginMs ?? SQLITE_HIT_LOG_MARGIN_MS;
    if (!(marginMs >= 0)) throw new RangeError("the margin must be a number of ms, at least 0");
    const instance = options.instance;
    if (
      typeof instance !== "string" || instance.length === 0 ||
      instance.length > MAX_INSTANCE_LENGTH
    ) {
      throw new RangeError(`an instance id is 1 to ${MAX_INSTANCE_LENGTH} characters`);
    }
    this.#db = db;
    this.#instance = instance;
    this.#keepMs = windowMs + marginMs;
    this.#now = options.now ?? Date.now;
    this.#monotonic = options.monotonicNow ?? (() => performance.now());
    this.#insert = db.prepare(
      "INSERT INTO hit_log (instance, seq, at, hits) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
    );
    // A forged row may have pushed the ids past 2^53: read exactly, to say so.
    this.#insert.setReadBigInts(true);
    const where = `id > ? AND id <= ${MAX_SAFE} AND instance IS NOT ?`;
    this.#readFrom = db.prepare(
      `SELECT ${READ_COLUMNS} FROM hit_log WHERE ${where} ORDER BY id LIMIT ${EXCHANGE_ROWS}`,
    );
    this.#replayFrom = db.prepare(
      `SELECT ${READ_COLUMNS} FROM hit_log WHERE ${where} AND at >= ? ORDER BY id LIMIT ${EXCHANGE_ROWS}`,
    );
    this.#newest = db.prepare(`SELECT max(id) AS id FROM hit_log WHERE id <= ${MAX_SAFE}`);

    this.#trim = db.prepare(
      `DELETE FROM hit_log WHERE id IN (SELECT id FROM hit_log WHERE at < ? AND id <= ? LIMIT ${TRIM_ROWS})`,
    );
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
   * One transaction: with `mine`, a write transaction that inserts it, reads the others' rows after
   * the cursor and trims what left the window (at most once a second); without, a read. If it fails
   * (the write lock held past the busy timeout, a disk error, the commit), nothing of it is kept and
   * the cursor stays: the next exchange reads the same rows, and `mine` may be sent again.
   */
  exchange(mine: LogBatch | null): Promise<LogBatch[]> {
    try {
      return Promise.resolve(this.#exchange(mine));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #exchange(mine: LogBatch | null): LogBatch[] {
    if (mine !== null) this.#checkMine(mine);
    this.#roundTrips++;
    // A read is a transaction too: its statements see one snapshot of the file.
    this.#db.exec(mine === null ? "BEGIN" : "BEGIN IMMEDIATE");
    const before = { cursor: this.#cursor, replaying: this.#replaying, more: this.#more };
    try {
      const now = this.#now();
      const inserted = mine === null
        ? undefined
        : this.#insert.get(mine.instance, mine.seq, now, mine.hits) as { id: bigint } | undefined;
      const batches = this.#read();
      if (mine !== null && now - this.#trimmedAt >= TRIM_EVERY_MS) this.#trimAt(now);
      this.#db.exec("COMMIT");
      // After the commit: a mark claims only rows that were there.
      this.#mark();
      if (mine !== null) this.#checkAppended(mine, inserted);
      return batches;
    } catch (error) {
      if (this.#db.isTransaction) this.#db.exec("ROLLBACK");
      // What was read is returned by no one: the next exchange reads it again.
      ({ cursor: this.#cursor, replaying: this.#replaying, more: this.#more } = before);
      throw error;
    }
  }

  /**
   * Deletes the rows this instance had read or passed over a window and the margin ago by its
   * monotonic clock (so every reader syncing more often than that has read them, and their hits
   * have left every window), that were also appended that long ago by its wall clock.
   */
  #trimAt(now: number): void {
    const mono = this.#monotonic();
    const marks = this.#marks;
    let bound = 0;
    while (marks.length > 0 && marks[0]!.at <= mono - this.#keepMs) bound = marks.shift()!.cursor;
    if (bound > 0) this.#trim.run(now - this.#keepMs, bound);
    this.#trimmedAt = now;
  }

  /**
   * Notes the cursor by the monotonic clock, at most once a second (a later row waits for the next
   * mark): a window and the margin later, the rows up to it may be trimmed.
   */
  #mark(): void {
    const mono = this.#monotonic();
    const last = this.#marks.at(-1);
    if (last !== undefined && mono - last.at < TRIM_EVERY_MS) return;
    if (last !== undefined && last.cursor === this.#cursor) return;
    this.#marks.push({ at: mono, cursor: this.#cursor });
  }

  /** Tells the signs that a row this writer did not write moved its numbers or the ids. */
  #checkAppended(mine: LogBatch, inserted: { id: bigint } | undefined): void {
    if (inserted === undefined && mine.seq !== this.#lastSent) {
      this.#tampered(
        `batch ${mine.seq} of ${mine.instance} was refused the first time it was sent: a row under its id and number was there`,
      );
    } else if (inserted !== undefined && inserted.id > BigInt(MAX_SAFE)) {
      this.#tampered(
        "a row's id is past 2^53, so the rows appended after it are not read: delete the hit_log table",
      );
    }
    this.#lastSent = mine.seq;
  }

  /**
   * The others' rows after the cursor, at most a chunk; while replaying, only those appended in the
   * last window and margin, and once the replay is read, the cursor moves past every row there.
   */
  #read(): LogBatch[] {
    const rows =
      (this.#replaying
        ? this.#replayFrom.all(this.#cursor, this.#instance, this.#now() - this.#keepMs)
        : this.#readFrom.all(this.#cursor, this.#instance)) as unknown as Row[];
    const batches: LogBatch[] = [];
    for (const row of rows) {
      if (row.instance === null || row.seq === null || row.hits === null) {
        this.#health.unreadable++;
        this.#health.unreadableReason = row.hits === null
          ? `a row whose hits are not bytes of at most ${SQLITE_MAX_BATCH_BYTES}`
          : "a row whose writer or number is not of its type";
      } else {
        batches.push({ instance: row.instance, seq: row.seq, hits: row.hits });
      }
    }
    this.#more = rows.length === EXCHANGE_ROWS;
    const last = rows.at(-1);
    if (last !== undefined) this.#cursor = last.id;
    if (!this.#more) {
      // Every row past the cursor was scanned: those not returned are this instance's own (or,
      // while replaying, older than the window). Past them too, so that they can be trimmed.
      const newest = (this.#newest.get() as { id: number | null } | undefined)?.id ?? 0;
      this.#cursor = Math.max(this.#cursor, newest);
      this.#replaying = false;
    }
    return batches;
  }

  /** {@inheritDoc HitLog.close} */
  close(): void {
    if (this.#db.isOpen) this.#db.close();
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

  #tampered(reason: string): void {
    this.#health.tampered++;
    this.#health.tamperedReason = reason;
  }
}

/**
 * Switches `db`'s file to WAL, trying again for {@linkcode OPEN_BUSY_TIMEOUT_MS} while another
 * process holds it locked. SQLite answers "database is locked" at once, without the busy handler,
 * when two processes switch a new file at the same instant (each holds the shared lock the other
 * waits for): two instances started together failed so in 5 to 7 of 60 tries here.
 */
function switchToWal(db: DatabaseSync): void {
  const deadline = performance.now() + OPEN_BUSY_TIMEOUT_MS;
  for (;;) {
    try {
      db.exec("PRAGMA journal_mode = WAL");
      return;
    } catch (error) {
      if (!isLocked(error) || performance.now() >= deadline) throw error;
      // Start-up only, before anything is served: a blocking pause is what the busy handler does.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, OPEN_RETRY_MS);
    }
  }
}

/** Whether SQLite refused for another connection's lock (SQLITE_BUSY or SQLITE_LOCKED). */
function isLocked(error: unknown): boolean {
  return error instanceof Error && /locked|busy/i.test(error.message);
}

/**
 * Why the file at `SQLITE_PATH` could not be opened, as one sentence naming the variable and what
 * to do (start-up prints it and stops).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const error = new Error("unable to open database file");
 * assert.match(explainSqliteOpenError(error, "/nowhere/hits.sqlite3"), /folder \/nowhere does not exist/);
 * ```
 */
export function explainSqliteOpenError(error: unknown, path: string): string {
  const message = error instanceof Error ? error.message : String(error);
  const folder = dirname(resolve(path));
  let reason: string;
  if (/not capable|requires (read|write) access|NotCapable/i.test(message)) {
    reason =
      `this process may not read and write ${folder}, so grant --allow-read and --allow-write for that folder`;
  } else if (!isFolder(folder)) {
    reason =
      `its folder ${folder} does not exist, so create it or set SQLITE_PATH to a file in one`;
  } else if (/unable to open|readonly|read-only|permission|access/i.test(message)) {
    reason =
      `the file cannot be created or written there, so give the service's user read and write access to ${folder} (on a writable file system)`;
  } else if (/not a database|malformed|corrupt/i.test(message)) {
    reason = `it is not a SQLite database (${message}), so set SQLITE_PATH to a file of its own`;
  } else if (isLocked(error)) {
    reason = `another process held it locked for over ${
      OPEN_BUSY_TIMEOUT_MS / 1000
    } s, so check what else opens it`;
  } else {
    reason = `${message}, so check SQLITE_PATH`;
  }
  return `${SQLITE_OPEN_FAILURE} ${path}: ${reason}`;
}

/** Whether `path` is a folder this process can see. */
function isFolder(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
