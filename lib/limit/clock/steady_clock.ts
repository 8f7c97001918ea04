/**
 * The clock rate-limit decisions are stamped by where no store's clock decides (the memory store,
 * Deno KV): the wall clock read once, then advanced by the monotonic clock (`performance.now()`), so
 * that a step of the wall clock (NTP stepping it, a VM resumed, an operator's `date -s`) does not
 * move a caller's window.
 *
 * A step reaches a store that stamps by `Date.now()`: forward by 30 s, every counted request looks
 * 30 s older and a caller gets a fresh window early (up to twice the limit in one real window); back
 * by 30 s, they stay 30 s longer (a caller refused up to 30 s past its window). Linux's monotonic
 * clock is never stepped, and NTP's frequency corrections (the slewing of ntpd, chrony and
 * timesyncd) apply to it as to the wall clock, so between steps the two run together.
 *
 * - The memory store's stamps are compared with nothing else: its clock never follows the wall
 *   clock (`slewRate` 0). A window lasts the window of the process's running time, whatever the
 *   wall clock does.
 * - Deno KV's stamps are compared with the other instances', which are written by their wall
 *   clocks: there, a clock that never followed a step (an instance's clock put right by NTP) would
 *   disagree with the others for ever. So it follows the wall clock at a bounded rate
 *   ({@linkcode KV_SLEW_RATE}: a window lasts between 98% and 102% of itself while it catches up,
 *   and a 30 s step is caught up in 25 minutes), and an error larger than the window, which no
 *   slewing could absorb within a few dozen windows (and where the instances' windows no longer
 *   overlap at all), is stepped at once, as the wall clock was.
 *
 * @module
 */

/** How fast the Deno KV clock follows a step of the wall clock: 2% (20 ms per second). */
export const KV_SLEW_RATE = 0.02;

/** Options of {@linkcode SteadyClock}. */
export interface SteadyClockOptions {
  /** The wall clock, ms since the epoch (default `Date.now`). */
  wall?: () => number;
  /** A monotonic clock, ms (default `performance.now`). */
  monotonic?: () => number;
  /**
   * How fast the clock follows the wall clock when they differ, as a fraction of the time elapsed
   * (0.02: 20 ms per second). Default 0: it never does.
   */
  slewRate?: number;
  /** A difference larger than this (ms) is stepped at once instead (default: never). */
  maxSlewMs?: number;
}

/** The wall clock read once, then run by the monotonic clock (and, with `slewRate`, slewed to it). */
export class SteadyClock {
  readonly #wall: () => number;
  readonly #monotonic: () => number;
  readonly #rate: number;
  readonly #maxSlewMs: number;
  /** This clock minus the monotonic clock. */
  #base: number;
  /** The monotonic time of the last reading. */
  #last: number;

  /** Creates the clock, anchored on the wall clock now. */
  constructor(options: SteadyClockOptions = {}) {
    this.#wall = options.wall ?? Date.now;
    this.#monotonic = options.monotonic ?? (() => performance.now());
    this.#rate = Math.max(0, Math.min(0.5, options.slewRate ?? 0));
    this.#maxSlewMs = options.maxSlewMs ?? Infinity;
    this.#last = this.#monotonic();
    this.#base = this.#wall() - this.#last;
  }

  /**
   * The time now, whole ms since the epoch as `Date.now()` reads it: never moved by a step of the
   * wall clock within `maxSlewMs`. Whole, since `performance.now()` has fractions: the requests of
   * one millisecond share one entry of a caller's log (`memory/run_length_log.ts`), where a
   * fraction gave each its own (a hot caller's log grew to a cell per request, and the garbage of
   * trimming it doubled what the heap promoted per request).
   */
  readonly now = (): number => {
    const mono = this.#monotonic();
    if (this.#rate > 0) {
      const error = this.#wall() - (this.#base + mono);
      if (Math.abs(error) > this.#maxSlewMs) {
        this.#base += error;
      } else {
        // Lazily: the slewing since the last reading, as if it had run continuously.
        const room = this.#rate * Math.max(0, mono - this.#last);
        this.#base += Math.max(-room, Math.min(room, error));
      }
      this.#last = mono;
    }
    return Math.floor(this.#base + mono);
  };
}

/** The memory store's clock: never follows the wall clock. */
export function memoryClock(): () => number {
  return new SteadyClock().now;
}

/**
 * The clock of Deno KV's stamps, shared with other instances: follows the wall clock at
 * {@linkcode KV_SLEW_RATE}, steps where it is more than a window away.
 */
export function kvClock(windowMs: number): () => number {
  return new SteadyClock({ slewRate: KV_SLEW_RATE, maxSlewMs: windowMs }).now;
}
