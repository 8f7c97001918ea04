/**
 * The shared hit log of the `local-first` consistency: every instance appends the hits it admitted
 * to one log in the store, in packed batches, and reads the batches of the others since it last
 * read. Each instance keeps every caller of the deployment in its own memory store and decides
 * there, so no request waits for the store, and a process that starts reads the last window first,
 * so restarts and handovers keep the count.
 *
 * This module holds the contract the stores' logs implement; what a batch holds is the business of
 * the instance that packs and unpacks it, not of the log.
 *
 * @module
 */

/** One batch of one instance's admitted hits, as the log keeps it. */
export interface LogBatch {
  /** The id of the instance (process) that wrote it. */
  readonly instance: string;
  /**
   * Its number among that instance's batches, from 0. A batch whose exchange failed is sent again
   * with the same number: a log that can should keep it once.
   */
  readonly seq: number;
  /** The hits, packed; opaque to the log. At most the log's `maxBatchBytes`. */
  readonly hits: Uint8Array;
}

/**
 * What a log met that it could not use, as counters since it was opened: it skipped each and went
 * on ({@linkcode HitLog.health}). The reasons are for an operator's warning: they never carry an
 * entry's content.
 */
export interface LogHealth {
  /** Entries read that are not a batch (a field missing, not base64, not bytes): skipped. */
  unreadable: number;
  /** Why the last unreadable entry was, in one sentence. */
  unreadableReason: string;
  /**
   * Signs that an entry this instance did not write moved the numbers of its own or another
   * writer's batches (a registry or number ahead of every batch, a number that went back, an
   * append refused as a duplicate the first time it was sent).
   */
  tampered: number;
  /** What the last such sign was, in one sentence. */
  tamperedReason: string;
}

/** A log of batches in a shared store. */
export interface HitLog {
  /**
   * One exchange with the store, in as few round trips as the store allows (one for Redis): appends
   * `mine` when it is not null, then returns, in the order they were appended, the batches of other
   * instances appended since the previous exchange. The first exchange returns every batch appended
   * in the last `windowMs` (plus a margin the log states), whoever wrote it: that is how a process
   * that starts learns the window. No batch is returned twice, and an instance's own batches are
   * never returned to it.
   *
   * A log may return fewer batches than wait, bounded in bytes so that a replay of a large log is
   * held one chunk at a time (`more` then says so, and the next exchange reads on). An entry it
   * cannot read is skipped and counted in `health`, never thrown: one bad entry costs that entry.
   */
  exchange(mine: LogBatch | null): Promise<LogBatch[]>;
  /** Whether the last exchange stopped at its read bound with batches still waiting. */
  readonly more?: boolean | undefined;
  /** What the log skipped so far (omitted: a log that meets nothing it cannot read). */
  readonly health?: LogHealth | undefined;
  /** The largest `hits` the log takes in one batch, in bytes (Deno KV caps a value at 64 KiB). */
  readonly maxBatchBytes: number;
  /** Round trips sent so far. */
  readonly roundTrips: number;
  /** Releases the connection (or the database) when the log owns it. */
  close(): void | Promise<void>;
}
