/**
 * The sliding log of one caller with more than one counted request: one timestamp per distinct
 * time, oldest first, in one plain array of numbers, with a count only where several
 * requests share a time.
 *
 * A caller hammering the service at tens of thousands of requests per second with a high limit
 * counts many requests in each millisecond: one timestamp per request grew a log to the limit (up
 * to a million entries, and an O(n) trim per request). Here requests at one time share one entry
 * (timestamps are compared, never rounded: requests are grouped only when their times are equal),
 * so the decision stays exact and the log is bounded by the distinct times in the window (the
 * window's length in milliseconds for a millisecond clock), not by the limit. A caller whose
 * requests each have their own millisecond (the common case) pays one cell per request, as a plain
 * list of timestamps does: the count cell exists only for a repeated time.
 *
 * Layout: `[total, head, ...]`: `total` requests in the live entries, which start at index `head`.
 * An entry is a timestamp `t`, standing for one request at `t`, optionally followed by a count cell
 * `RUN_MARK - k` (below every timestamp) standing for `k` more requests at `t`. Entries before
 * `head` have left the window and are cut off in one go once they are as many cells as the live
 * ones, so that trimming costs O(1) amortised per entry. Timestamps must lie above
 * {@linkcode TIME_FLOOR} (the memory store's absolute milliseconds do; it refuses others) and a log holds at
 * most 2^21 requests at one time (a limit of at most a million does).
 *
 * @module
 */

/** A caller's sliding log: see the module comment for the layout. */
export type RunLog = number[];

/** Index of the total count. */
const TOTAL = 0;
/** Index of the index of the first live entry. */
const HEAD = 1;
/** Index of the first entry when none has been trimmed. */
const FIRST = 2;
/** Trimmed cells are cut off once there are at least this many of them and as many as live ones. */
const COMPACT_AFTER = 8;

/**
 * Every timestamp is above this (about 14 days before 1970, far below any clock's reading): cells
 * at or below it are count cells.
 */
export const TIME_FLOOR = -(2 ** 30) - 2 ** 27;
/**
 * A count cell `RUN_MARK - k` stands for `k` more requests at the timestamp before it; with `k`
 * below 2^21 it stays above -2^31 and below {@linkcode TIME_FLOOR}.
 */
export const RUN_MARK = -(2 ** 31) + 2 ** 21;

/** Whether the cell at `i` is a timestamp (not a count cell, not past the end). */
function isTime(log: RunLog, i: number): boolean {
  return i < log.length && log[i]! > TIME_FLOOR;
}

/** Requests at the entry starting at `i`, and the index of the next entry. */
function entryAt(log: RunLog, i: number): { count: number; next: number } {
  const cell = log[i + 1];
  if (cell === undefined || cell > TIME_FLOOR) return { count: 1, next: i + 1 };
  return { count: 1 + RUN_MARK - cell, next: i + 2 };
}

/** Index of the newest entry's timestamp (`log.length` when no entry is live). */
function newestIndex(log: RunLog): number {
  const last = log.length - 1;
  if (last < log[HEAD]!) return log.length;
  return log[last]! > TIME_FLOOR ? last : last - 1;
}

/** Counts one more request at the entry whose timestamp is at `i`. */
function countAgain(log: RunLog, i: number): void {
  const cell = log[i + 1];
  if (cell !== undefined && cell <= TIME_FLOOR) log[i + 1] = cell - 1;
  else if (i + 1 === log.length) log.push(RUN_MARK - 1);
  else log.splice(i + 1, 0, RUN_MARK - 1);
}

/** A log of two counted requests at `a` and `b`, in either order. */
export function twoRequests(a: number, b: number): RunLog {
  if (a === b) return [2, FIRST, a, RUN_MARK - 1];
  return a < b ? [2, FIRST, a, b] : [2, FIRST, b, a];
}

/** Requests counted in the live entries. */
export function countOf(log: RunLog): number {
  return log[TOTAL]!;
}

/** The oldest live timestamp, or `undefined` when no entry is live. */
export function oldestOf(log: RunLog): number | undefined {
  return log[TOTAL] === 0 ? undefined : log[log[HEAD]!];
}

/** Forgets the entries at or before `cutoff`. */
export function trim(log: RunLog, cutoff: number): void {
  let head = log[HEAD]!;
  const length = log.length;
  if (head >= length || log[head]! > cutoff) return;
  let total = log[TOTAL]!;
  while (head < length && log[head]! <= cutoff) {
    const entry = entryAt(log, head);
    total -= entry.count;
    head = entry.next;
  }
  log[TOTAL] = total;
  const dead = head - FIRST;
  if (dead >= COMPACT_AFTER && dead >= length - head) {
    log.copyWithin(FIRST, head);
    log.length = length - dead;
    head = FIRST;
  }
  log[HEAD] = head;
}

/**
 * Counts a request at `t`: in the newest entry when `t` equals its time, else in order.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const log = twoRequests(1000, 1000); // two requests in one millisecond: one entry
 * add(log, 1000);
 * add(log, 1001);
 * assert.equal(countOf(log), 4);
 * assert.equal(oldestOf(log), 1000);
 * trim(log, 1000); // the entry at 1000 leaves the window
 * assert.equal(countOf(log), 1);
 * assert.equal(oldestOf(log), 1001);
 * ```
 */
export function add(log: RunLog, t: number): void {
  log[TOTAL]!++;
  const newest = newestIndex(log);
  if (newest < log.length) {
    const time = log[newest]!;
    if (t === time) return countAgain(log, newest);
    if (t < time) return insertLate(log, t); // the clock stepped back: times stay ascending
  }
  log.push(t);
}

/** Counts a request at `t` older than the newest entry: in its entry if one has its time. */
function insertLate(log: RunLog, t: number): void {
  const head = log[HEAD]!;
  let i = newestIndex(log);
  let at = log.length;
  while (i >= head && log[i]! > t) {
    at = i;
    i--;
    if (i >= head && !isTime(log, i)) i--;
  }
  if (i >= head && log[i] === t) countAgain(log, i);
  else log.splice(at, 0, t);
}

/** Count and oldest time of the entries after `cutoff`, without changing the log. */
export function liveAfter(log: RunLog, cutoff: number): { count: number; oldest: number } {
  let total = log[TOTAL]!;
  for (let i = log[HEAD]!; i < log.length;) {
    if (log[i]! > cutoff) return { count: total, oldest: log[i]! };
    const entry = entryAt(log, i);
    total -= entry.count;
    i = entry.next;
  }
  return { count: 0, oldest: 0 };
}

/** Keeps only the newest `limit` requests (after the limit was lowered under a live store). */
export function keepNewest(log: RunLog, limit: number): void {
  let head = log[HEAD]!;
  let excess = log[TOTAL]! - limit;
  while (excess > 0) {
    const entry = entryAt(log, head);
    if (entry.count > excess) {
      const left = entry.count - excess;
      if (left > 1) {
        log[head + 1] = RUN_MARK - (left - 1);
      } else {
        // One request left: its timestamp moves onto the count cell, which becomes a plain entry.
        log[head + 1] = log[head]!;
        head++;
      }
      break;
    }
    excess -= entry.count;
    head = entry.next;
  }
  log[TOTAL] = Math.min(log[TOTAL]!, limit);
  log[HEAD] = head;
}
