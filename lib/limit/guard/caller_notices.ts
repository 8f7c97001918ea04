/**
 * What the operator is told of the callers answered by the failure policy because their own object
 * failed (a store of many objects, its namespace up): each such caller is an outage for that caller,
 * so it is said, but an incident per object would be a line per attacker key. So a line per caller
 * per window at most, naming at most {@linkcode MAX_CALLER_NOTICES} callers a window; the answers to
 * callers beyond them are counted, and the count is said with the first line of the next window.
 * The caller is named by a label the store is given (the access log's truncation: `/24`, `/48`),
 * never by its key.
 *
 * @module
 */

/**
 * The most callers named in one window, per isolate or instance: enough to name the few objects
 * that fail at once in an isolate (an overloaded object is one caller's), few enough that a spray
 * of failing keys costs at most this many log lines a window (Workers Logs bills each line).
 */
export const MAX_CALLER_NOTICES = 10;

/** One line's facts: a caller answered by the failure policy because its own object failed. */
export interface CallerNotice {
  /** The caller, as the label names it (truncated: never a full address). */
  caller: string;
  /** The object's failure, as `Name: message`; absent when its breaker answered (no call). */
  error?: string;
  /** This is the last caller named this window: further ones are counted, not named. */
  last?: true;
  /** Answers to callers not named in the window before this line's, when there were any. */
  unnamedBefore?: number;
}

/** Options of {@linkcode CallerNotices}. */
export interface CallerNoticesOptions {
  /** How long a window lasts, in ms (the rate limit's window). */
  windowMs: number;
  /** Names a caller key in a line (truncated). */
  label: (key: string) => string;
  /** Clock, in ms. */
  clock: () => number;
}

/**
 * Decides which answers of the failure policy get a line.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * let now = 0;
 * const label = (key: string) => `${key.slice(0, key.lastIndexOf("."))}.0`;
 * const notices = new CallerNotices({ windowMs: 60_000, label, clock: () => now });
 * assert.deepEqual(notices.note("192.0.2.77", "Error: overloaded"), {
 *   caller: "192.0.2.0",
 *   error: "Error: overloaded",
 * });
 * assert.equal(notices.note("192.0.2.77", "Error: overloaded"), undefined, "once per window");
 * now = 60_000;
 * assert.equal(notices.note("192.0.2.77")?.caller, "192.0.2.0", "and again the next window");
 * ```
 */
export class CallerNotices {
  readonly #windowMs: number;
  readonly #label: (key: string) => string;
  readonly #clock: () => number;
  readonly #named = new Set<string>();
  #windowEnds = Number.NEGATIVE_INFINITY;
  #unnamed = 0;
  #unnamedBefore = 0;

  /** Creates the notices of a store. */
  constructor(options: CallerNoticesOptions) {
    this.#windowMs = options.windowMs;
    this.#label = options.label;
    this.#clock = options.clock;
  }

  /** The line for `key`'s answer now, if it is its first this window and the window has room. */
  note(key: string, error?: string): CallerNotice | undefined {
    const now = this.#clock();
    if (now >= this.#windowEnds) {
      this.#windowEnds = now + this.#windowMs;
      this.#named.clear();
      this.#unnamedBefore += this.#unnamed;
      this.#unnamed = 0;
    }
    if (this.#named.has(key)) return undefined;
    if (this.#named.size >= MAX_CALLER_NOTICES) {
      this.#unnamed++;
      return undefined;
    }
    this.#named.add(key);
    const notice: CallerNotice = { caller: this.#label(key) };
    if (error !== undefined) notice.error = error;
    if (this.#named.size === MAX_CALLER_NOTICES) notice.last = true;
    if (this.#unnamedBefore > 0) {
      notice.unnamedBefore = this.#unnamedBefore;
      this.#unnamedBefore = 0;
    }
    return notice;
  }
}
