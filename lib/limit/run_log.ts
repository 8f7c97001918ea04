/**
 * The sliding log of one caller with more than one counted request, as runs of equal timestamps:
 * `(time, count)` pairs, oldest first, in one plain array of small integers.
 *
 * A caller hammering the service at tens of thousands of requests per second with a high limit
 * counts many requests in each millisecond: one timestamp per request grew a log to the limit (up
 * to a million entries, and an O(n) trim per request). Runs hold the same information (timestamps
 * are compared, never rounded: requests are grouped only when their times are equal), so the
 * decision stays exact, and the log is bounded by the distinct times in the window (the window's
 * length in milliseconds for a millisecond clock), not by the limit.
 *
 * Layout: `[total, head, t0, c0, t1, c1, ...]`: `total` requests in the live runs, which start at
 * index `head`; runs before `head` have left the window and are cut off in one go once they are as
 * many as the live ones, so that trimming costs O(1) amortised per run.
 *
 * @module
 */

/** A caller's sliding log as runs: see the module comment for the layout. */
export type RunLog = number[];

/** Index of the total count. */
const TOTAL = 0;
/** Index of the index of the first live run. */
const HEAD = 1;
/** Index of the first run when none has been trimmed. */
const FIRST = 2;
/** Trimmed runs are cut off once there are at least this many of them and as many as live ones. */
const COMPACT_AFTER = 8;

/** A log of two counted requests at `a` and `b`, in either order. */
export function twoRequests(a: number, b: number): RunLog {
  if (a === b) return [2, FIRST, a, 2];
  return a < b ? [2, FIRST, a, 1, b, 1] : [2, FIRST, b, 1, a, 1];
}

/** Requests counted in the live runs. */
export function countOf(log: RunLog): number {
  return log[TOTAL]!;
}

/** The oldest live timestamp, or `undefined` when no run is live. */
export function oldestOf(log: RunLog): number | undefined {
  return log[TOTAL] === 0 ? undefined : log[log[HEAD]!];
}

/** The newest timestamp (`undefined` when no run is live). */
export function newestOf(log: RunLog): number | undefined {
  return log[TOTAL] === 0 ? undefined : log[log.length - 2];
}

/** Forgets the runs at or before `cutoff`. */
export function trim(log: RunLog, cutoff: number): void {
  let head = log[HEAD]!;
  const length = log.length;
  if (head >= length || log[head]! > cutoff) return;
  let total = log[TOTAL]!;
  while (head < length && log[head]! <= cutoff) {
    total -= log[head + 1]!;
    head += 2;
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
 * Counts a request at `t`: in the newest run when `t` equals its time, else in order.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const log = twoRequests(1000, 1000); // two requests in one millisecond: one run
 * add(log, 1000);
 * add(log, 1001);
 * assert.equal(countOf(log), 4);
 * assert.equal(oldestOf(log), 1000);
 * trim(log, 1000); // the run at 1000 leaves the window
 * assert.equal(countOf(log), 1);
 * assert.equal(oldestOf(log), 1001);
 * ```
 */
export function add(log: RunLog, t: number): void {
  log[TOTAL]!++;
  const last = log.length - 2;
  if (last >= log[HEAD]!) {
    const newest = log[last]!;
    if (t === newest) {
      log[last + 1]!++;
      return;
    }
    if (t < newest) {
      insertRun(log, t); // the clock stepped back: the runs stay ascending
      return;
    }
  }
  log.push(t, 1);
}

/** Counts a request at `t` older than the newest run: in its run if one has its time, else a new one. */
function insertRun(log: RunLog, t: number): void {
  let i = log.length - 2;
  const head = log[HEAD]!;
  while (i >= head && log[i]! > t) i -= 2;
  if (i >= head && log[i] === t) log[i + 1]!++;
  else log.splice(i + 2, 0, t, 1);
}

/** Count and oldest time of the runs after `cutoff`, without changing the log. */
export function liveAfter(log: RunLog, cutoff: number): { count: number; oldest: number } {
  let total = log[TOTAL]!;
  for (let i = log[HEAD]!; i < log.length; i += 2) {
    if (log[i]! > cutoff) return { count: total, oldest: log[i]! };
    total -= log[i + 1]!;
  }
  return { count: 0, oldest: 0 };
}

/** Keeps only the newest `limit` requests (after the limit was lowered under a live store). */
export function keepNewest(log: RunLog, limit: number): void {
  let head = log[HEAD]!;
  let excess = log[TOTAL]! - limit;
  while (excess > 0) {
    const count = log[head + 1]!;
    if (count > excess) {
      log[head + 1] = count - excess;
      break;
    }
    excess -= count;
    head += 2;
  }
  log[TOTAL] = Math.min(log[TOTAL]!, limit);
  log[HEAD] = head;
}

/** Subtracts `shift` from every timestamp (the store moved its base time). */
export function shiftTimes(log: RunLog, shift: number): void {
  for (let i = log[HEAD]!; i < log.length; i += 2) log[i] = log[i]! - shift;
}
