/**
 * Whose clock is wrong, told from the stamps of the hits other instances share (`local-first`).
 *
 * Every batch a peer sends carries its hits' times, stamped by its clock. The newest of them was
 * stamped at most a sync's delay before it arrives, so a stamp in this instance's future is a clock
 * ahead of this one (the peer's, or this one behind) by at least that lead, and a peer whose newest
 * stamps lag by more than any delay of a working sync is behind. Each peer's lead is the largest
 * seen in the last {@linkcode PEER_MEMORY_MS} (the freshest stamp: a backlog sent after an outage
 * lags, its newest batches do not).
 *
 * One clock against one other cannot say which of the two is wrong; three or more can: the verdict
 * is the majority's. When this instance agrees with most of the clocks it knows (itself included),
 * the peers that disagree are the wrong ones (`peer`); when most of them agree among themselves and
 * not with this one, this instance is (`self`); otherwise, two clocks or no majority, it says that it
 * cannot tell (`undecided`). So a healthy instance never blames itself while a majority agrees with
 * it, and one whose clock is wrong says so once two others are there to outvote it.
 *
 * @module
 */

/** How long a peer's lead is remembered without a new batch, ms (by the monotonic clock). */
export const PEER_MEMORY_MS = 60_000;

/** What {@linkcode PeerClocks.verdict} tells. */
export type ClockVerdict =
  | { kind: "agree" }
  | {
    /** These peers' clocks disagree with the majority's, which this instance's is part of. */
    kind: "peer";
    /** Each wrong peer with its clock minus this one's (ms; positive: ahead). */
    peers: Array<{ instance: string; offsetMs: number }>;
  }
  | {
    /** This instance's clock disagrees with the majority of its peers'. */
    kind: "self";
    /** This instance's clock minus the majority's (ms; positive: this one is ahead). */
    offsetMs: number;
    /** Peers that outvote it, and peers known. */
    outvotedBy: number;
    peers: number;
  }
  | {
    /** Clocks disagree and no majority says whose is wrong (two instances, or a split). */
    kind: "undecided";
    /** Each peer that disagrees with this instance, with its clock minus this one's (ms). */
    peers: Array<{ instance: string; offsetMs: number }>;
  };

/** Options of {@linkcode PeerClocks}. */
export interface PeerClocksOptions {
  /** A lead above this is a clock ahead, ms. */
  toleranceMs: number;
  /** A lag above this is a clock behind, ms: longer than any working sync takes to deliver a hit. */
  lagMs: number;
  /** A monotonic clock in ms (default `performance.now`). */
  monotonic?: () => number;
}

/** The peers' clocks as their stamps show them. */
export class PeerClocks {
  readonly #options: PeerClocksOptions;
  readonly #monotonic: () => number;
  readonly #peers = new Map<string, { leadMs: number; at: number }>();

  /** Creates an empty record. */
  constructor(options: PeerClocksOptions) {
    this.#options = options;
    this.#monotonic = options.monotonic ?? (() => performance.now());
  }

  /** Takes the newest stamp of a batch of `instance`, received when this clock read `now`. */
  observe(instance: string, newestStamp: number, now: number): void {
    const leadMs = newestStamp - now;
    const at = this.#monotonic();
    const known = this.#peers.get(instance);
    if (known === undefined || at - known.at > PEER_MEMORY_MS || leadMs >= known.leadMs) {
      this.#peers.set(instance, { leadMs, at });
    }
  }

  /**
   * Whose clock is wrong now, by the majority of the clocks seen in the last
   * {@linkcode PEER_MEMORY_MS}.
   *
   * @example
   * ```ts
   * import assert from "node:assert/strict";
   * const clocks = new PeerClocks({ toleranceMs: 1000, lagMs: 10_000 });
   * const now = 1_700_000_000_000;
   * clocks.observe("a", now + 86_400_000, now);
   * assert.equal(clocks.verdict().kind, "undecided"); // one against one
   * clocks.observe("b", now - 50, now);
   * assert.deepEqual(clocks.verdict(), {
   *   kind: "peer",
   *   peers: [{ instance: "a", offsetMs: 86_400_000 }],
   * });
   * ```
   */
  verdict(): ClockVerdict {
    const at = this.#monotonic();
    const off: Array<{ instance: string; offsetMs: number }> = [];
    let agreeing = 0;
    for (const [instance, peer] of this.#peers) {
      if (at - peer.at > PEER_MEMORY_MS) {
        this.#peers.delete(instance);
        continue;
      }
      const lead = peer.leadMs;
      if (lead > this.#options.toleranceMs || lead < -this.#options.lagMs) {
        off.push({ instance, offsetMs: Math.round(lead) });
      } else {
        agreeing++;
      }
    }
    if (off.length === 0) return { kind: "agree" };
    const clocks = off.length + agreeing + 1;
    if (2 * (agreeing + 1) > clocks) return { kind: "peer", peers: off };
    const median = medianOf(off.map((peer) => peer.offsetMs));
    const together = off.filter((peer) =>
      Math.abs(peer.offsetMs - median) <= this.#options.toleranceMs + this.#options.lagMs
    );
    if (2 * together.length > clocks) {
      return { kind: "self", offsetMs: -median, outvotedBy: together.length, peers: clocks - 1 };
    }
    return { kind: "undecided", peers: off };
  }
}

function medianOf(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)]!;
}
