/**
 * The `local-first` store stamped by the store's clock: every hit and peek is timed by the clock all
 * instances share (`lib/limit/clock/store_clock.ts`) rather than by this instance's, so that the
 * times it keeps, sends and compares are of one clock.
 *
 * @module
 */

import type { Decision } from "../core/decision.ts";
import type { ClockedStore, StoreClock } from "../clock/store_clock.ts";

/**
 * Wraps `store` so that every hit and peek is stamped by `clock` instead of the time the handler
 * passes: the `local-first` store then keeps, sends and compares times of one clock, the store's.
 * What tests and telemetry read of it (`stats`, `synced`, `sync`) is passed through, and the clock's
 * offset added; closing it stops the clock.
 */
export function stampedBy<S extends StampableStore>(store: S, clock: StoreClock): ClockedStore<S> {
  return new Stamped(store, clock) as unknown as ClockedStore<S>;
}

/** What {@linkcode stampedBy} needs of a store (the `local-first` one). */
export interface StampableStore {
  hit(key: string, now: number): Decision | Promise<Decision>;
  peek(key: string, now: number): Decision | Promise<Decision>;
  close(): Promise<void>;
  sync(): Promise<void>;
  stats(): unknown;
  readonly synced: boolean;
  /** Callers whose admitted hits the store has not acknowledged yet. */
  readonly backlog: number;
}

class Stamped implements StampableStore {
  readonly #store: StampableStore;
  readonly #clock: StoreClock;

  constructor(store: StampableStore, clock: StoreClock) {
    this.#store = store;
    this.#clock = clock;
  }

  hit(key: string, _now: number): Decision | Promise<Decision> {
    return this.#store.hit(key, this.#clock.now());
  }

  peek(key: string, _now: number): Decision | Promise<Decision> {
    return this.#store.peek(key, this.#clock.now());
  }

  sync(): Promise<void> {
    return this.#store.sync();
  }

  stats(): unknown {
    return this.#store.stats();
  }

  get synced(): boolean {
    return this.#store.synced;
  }

  get backlog(): number {
    return this.#store.backlog;
  }

  clockOffsetMs(): number | undefined {
    return this.#clock.offsetMs();
  }

  close(): Promise<void> {
    this.#clock.close();
    return this.#store.close();
  }
}
