/**
 * A {@linkcode HitLog} over one array in this process, for the tests of `local-first`: every
 * instance's log reads and appends the same batches, as the stores' logs do, with a round trip of
 * the test's choosing, failures on demand, and a batch sent again kept once.
 *
 * @module
 */

import type { HitLog, LogBatch } from "../../lib/limit/core/hit_log.ts";

/** What the shared store holds: batches with the time they were appended. */
export class SharedBatches {
  readonly batches: Array<{ at: number; batch: LogBatch }> = [];
  /** Makes every exchange fail (an outage). */
  down = false;

  readonly clock: () => number;
  readonly windowMs: number;

  // Fields assigned, not parameter properties: Node's type stripping runs this file (tests/node/).
  constructor(clock: () => number, windowMs: number) {
    this.clock = clock;
    this.windowMs = windowMs;
  }

  /** A log of this store for one instance; `delay` runs the two halves of its round trip. */
  log(options: { maxBatchBytes?: number; delay?: (run: () => void) => void } = {}): MemoryHitLog {
    return new MemoryHitLog(this, options.maxBatchBytes ?? 64 * 1024, options.delay);
  }
}

/** One instance's log of a {@linkcode SharedBatches}. */
export class MemoryHitLog implements HitLog {
  roundTrips = 0;
  /** Batches this log appended, in order. */
  readonly sent: LogBatch[] = [];
  #read = -1;
  #instance: string | undefined;

  readonly shared: SharedBatches;
  readonly maxBatchBytes: number;
  readonly delay: (run: () => void) => void;

  constructor(
    shared: SharedBatches,
    maxBatchBytes: number,
    delay: (run: () => void) => void = (run) => queueMicrotask(run),
  ) {
    this.shared = shared;
    this.maxBatchBytes = maxBatchBytes;
    this.delay = delay;
  }

  exchange(mine: LogBatch | null): Promise<LogBatch[]> {
    this.roundTrips++;
    return new Promise((resolve, reject) => {
      this.delay(() => {
        const shared = this.shared;
        if (shared.down) {
          this.delay(() => reject(new Error("connection refused")));
          return;
        }
        const now = shared.clock();
        if (mine !== null) {
          if (mine.hits.length > this.maxBatchBytes) throw new RangeError("batch too large");
          this.#instance = mine.instance;
          const again = shared.batches.some(({ batch }) =>
            batch.instance === mine.instance && batch.seq === mine.seq
          );
          if (!again) {
            shared.batches.push({ at: now, batch: mine });
            this.sent.push(mine);
          }
        }
        const first = this.#read < 0;
        const from = first ? 0 : this.#read;
        const reply = shared.batches.slice(from)
          .filter(({ at, batch }) =>
            (!first || at > now - shared.windowMs - 1000) && batch.instance !== this.#instance &&
            batch !== mine
          )
          .map(({ batch }) => batch);
        this.#read = shared.batches.length;
        this.delay(() => resolve(reply));
      });
    });
  }

  close(): void {}
}
