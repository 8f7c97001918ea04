/**
 * One clock for a shared rate-limit store: the instance's estimate of the store's clock, and how far
 * its own wall clock is from it.
 *
 * Instances that share a store must stamp hits by one clock, or an instance whose clock is 30 s ahead
 * sees the others' hits leave the window 30 s early and admits a caller again (two instances, a
 * limit of 60: 120 admitted). Redis `exact` needs nothing of this module to decide: its scripts read
 * the server's `TIME` (`redis/redis_scripts.ts`). Redis `local-first` decides here, so it stamps hits by
 * this clock: the server's time as NTP estimates it.
 *
 * - A sample reads the server's time between two readings of the monotonic clock: the server's time
 *   is taken to be the one at the midpoint (the round trip halved), with an error of at most half
 *   the round trip. Samples whose round trip took longer than `maxRttMs` say too little and are
 *   dropped (the sanity bound).
 * - Smoothing is NTP's clock filter: of the last `samples` samples, the one with the shortest round
 *   trip is used (the least delayed by queues and scheduling).
 * - The clock is `server time at the chosen sample + monotonic time elapsed since`, so it never
 *   reads the wall clock once a sample exists: a step of the instance's wall clock (NTP stepping it,
 *   an operator's `date -s`) changes nothing here. A step of the server's clock is followed within
 *   `samples · intervalMs` (the old samples age out).
 * - Before the first sample (a store down at start-up), the wall clock is used.
 *
 * The offset reported (`offsetMs`: the store's clock minus this instance's wall clock) feeds the
 * `ratelimit.clock.offset` metric and one warning line per episode above {@linkcode WARN_OFFSET_MS}.
 *
 * A store with no clock of its own (Deno KV) cannot be corrected. In `exact`,
 * {@linkcode StoreClock.observeStamp} takes the stamps other instances wrote and reports the lead of
 * one written in this instance's future (another clock ahead of this one) as the offset. In
 * `local-first`, where every peer's stamps come back, the majority of the peers' clocks decides whose
 * is wrong (`peer_clocks.ts`): {@linkcode StoreClock.observeOffset} takes this instance's offset from
 * that verdict (0 while it is in the majority), so that one peer ahead never makes a healthy
 * instance report itself behind.
 *
 * @module
 */

import { raceTimer, unref } from "../../timer.ts";

/** An offset above this, either way, is reported once per episode (ms). */
export const WARN_OFFSET_MS = 1000;

/** The episode ends when the offset is back under this (ms): a hysteresis, so one line per episode. */
export const CLEAR_OFFSET_MS = 500;

/** How often the store's clock is read by default (ms): one round trip per interval per instance. */
export const CLOCK_INTERVAL_MS = 2000;

/** Samples the filter chooses among by default: a server's step is followed within 8 s. */
export const CLOCK_SAMPLES = 4;

/** Samples with a longer round trip are dropped by default (ms): their error is up to half of it. */
export const MAX_SAMPLE_RTT_MS = 1000;

/** How long a stamp in the future keeps being reported (ms), when no clock can be read. */
const STAMP_MEMORY_MS = 60_000;

/** Options of {@linkcode StoreClock}. */
export interface StoreClockOptions {
  /** Reads the store's clock (ms since the epoch); omitted where the store has none (Deno KV). */
  read?: () => Promise<number>;
  /** Between two reads, ms (default {@linkcode CLOCK_INTERVAL_MS}). */
  intervalMs?: number;
  /** Samples kept for the filter (default {@linkcode CLOCK_SAMPLES}). */
  samples?: number;
  /** Longest round trip of a sample kept, ms (default {@linkcode MAX_SAMPLE_RTT_MS}). */
  maxRttMs?: number;
  /** The instance's wall clock (default `Date.now`). */
  wall?: () => number;
  /** A monotonic clock in ms (default `performance.now`). */
  monotonic?: () => number;
  /** Called once when the offset first exceeds {@linkcode WARN_OFFSET_MS}, again only after it came back. */
  onOffset?: (offsetMs: number) => void;
  /** Run the reads on a timer (default true; tests call {@linkcode StoreClock.sample}). */
  autoSample?: boolean;
}

interface Sample {
  /** The server's time minus the monotonic clock at the sample's midpoint. */
  base: number;
  rtt: number;
}

/** The store's clock as this instance estimates it. */
export class StoreClock {
  readonly #read: (() => Promise<number>) | undefined;
  readonly #intervalMs: number;
  readonly #size: number;
  readonly #maxRttMs: number;
  readonly #wall: () => number;
  readonly #monotonic: () => number;
  readonly #onOffset: ((offsetMs: number) => void) | undefined;
  readonly #samples: Sample[] = [];
  #base: number | undefined;
  #lead: { ms: number; at: number } | undefined;
  /** The offset the peers' majority tells (Deno KV local-first), once it has told one. */
  #majority: number | undefined;
  #warned = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  /** Creates the clock; with `read`, starts sampling (the first read at once). */
  constructor(options: StoreClockOptions = {}) {
    this.#read = options.read;
    this.#intervalMs = options.intervalMs ?? CLOCK_INTERVAL_MS;
    this.#size = Math.max(1, options.samples ?? CLOCK_SAMPLES);
    this.#maxRttMs = options.maxRttMs ?? MAX_SAMPLE_RTT_MS;
    this.#wall = options.wall ?? Date.now;
    this.#monotonic = options.monotonic ?? (() => performance.now());
    this.#onOffset = options.onOffset;
    if (this.#read !== undefined && (options.autoSample ?? true)) this.#schedule(0);
  }

  /**
   * The store's time now, whole ms since the epoch (the wall clock until a first sample): whole, as
   * `steady_clock.ts`'s readings are, so that the requests of one millisecond share one entry of a
   * caller's log.
   */
  now(): number {
    return this.#base === undefined ? this.#wall() : Math.floor(this.#base + this.#monotonic());
  }

  /**
   * The store's clock minus this instance's wall clock, ms: positive when this instance is behind.
   * With no clock to read, the lead of the newest stamp seen in this instance's future (0 if none
   * within a minute); undefined before anything was measured.
   */
  offsetMs(): number | undefined {
    if (this.#base !== undefined) return this.now() - this.#wall();
    if (this.#majority !== undefined) return this.#majority;
    if (this.#lead === undefined) return undefined;
    return this.#monotonic() - this.#lead.at > STAMP_MEMORY_MS ? 0 : this.#lead.ms;
  }

  /** Whether a sample has been taken: {@linkcode now} is the store's clock, not the wall's. */
  get synced(): boolean {
    return this.#base !== undefined;
  }

  /** Reads the store's clock once (with `read`); resolves when the sample is applied or dropped. */
  async sample(): Promise<void> {
    if (this.#read === undefined) return;
    const sent = this.#monotonic();
    const server = await this.#read();
    this.observe(server, sent, this.#monotonic());
  }

  /**
   * Takes a sample measured elsewhere: the server's time `serverMs` read by a call sent at the
   * monotonic `sentMono` and answered at `receivedMono` (Redis `exact` passes every decision's).
   */
  observe(serverMs: number, sentMono: number, receivedMono: number): void {
    const rtt = receivedMono - sentMono;
    if (!Number.isFinite(serverMs) || !(rtt >= 0) || rtt > this.#maxRttMs) return;
    this.#samples.push({ base: serverMs - (sentMono + receivedMono) / 2, rtt });
    if (this.#samples.length > this.#size) this.#samples.shift();
    let best = this.#samples[0]!;
    for (const s of this.#samples) if (s.rtt <= best.rtt) best = s;
    this.#base = best.base;
    this.#check();
  }

  /**
   * Takes a stamp another instance wrote to a store with no clock of its own (Deno KV): one in this
   * instance's future by more than {@linkcode WARN_OFFSET_MS} means a clock ahead of this one (the
   * other's, or this one stepped back) by at least that lead.
   */
  observeStamp(stampMs: number): void {
    const lead = stampMs - this.#wall();
    if (!(lead > WARN_OFFSET_MS)) return;
    if (this.#lead === undefined || lead >= this.#lead.ms || this.offsetMs() === 0) {
      this.#lead = { ms: lead, at: this.#monotonic() };
    }
    this.#check();
  }

  /**
   * Takes this instance's offset as the majority of its peers' clocks tells it (the peers' clock
   * minus this one's: positive when this one is behind; 0 while it agrees with the majority).
   * Reported as {@linkcode observeStamp}'s lead is, once per episode.
   */
  observeOffset(offsetMs: number): void {
    this.#majority = offsetMs;
    this.#check();
  }

  /**
   * Takes a sample before the first request, waiting at most `waitMs`: the wall clock stamps
   * meanwhile if the store is not there yet (a failed read is left to the store's incident).
   */
  async firstSample(waitMs: number): Promise<void> {
    await raceTimer(this.sample().catch(() => {}), waitMs, () => ({ answer: undefined }));
  }

  /** Stops sampling. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  /** Warns once per episode of an offset above the threshold. */
  #check(): void {
    const offset = this.offsetMs();
    if (offset === undefined) return;
    if (!this.#warned && Math.abs(offset) > WARN_OFFSET_MS) {
      this.#warned = true;
      this.#onOffset?.(Math.round(offset));
    } else if (this.#warned && Math.abs(offset) < CLEAR_OFFSET_MS) {
      this.#warned = false;
    }
  }

  #schedule(delayMs: number): void {
    if (this.#closed) return;
    this.#timer = setTimeout(() => {
      // A failed read is an outage the store's own incident reports; the clock keeps its estimate.
      this.sample().catch(() => {}).finally(() => this.#schedule(this.#intervalMs));
    }, delayMs);
    // The clock must never keep a process (or a test) alive.
    unref(this.#timer);
  }
}

/** A store with the offset of its clock to be observed (`ratelimit.clock.offset`). */
export type ClockedStore<S> = S & { clockOffsetMs: () => number | undefined };

/** Adds `clock`'s offset to what `store` exposes to be observed; decisions are untouched. */
export function observedClock<S extends object>(store: S, clock: StoreClock): ClockedStore<S> {
  return Object.assign(store, { clockOffsetMs: () => clock.offsetMs() });
}
