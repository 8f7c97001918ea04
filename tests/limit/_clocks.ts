/**
 * Clocks moved by hand for the clock tests: an instance's wall clock and its monotonic clock.
 *
 * @module
 */

/** The wall clock's time at the start of each test. */
export const T0 = 1_700_000_000_000;

/** What {@linkcode clocks} returns. */
export interface Clocks {
  /** Both clocks' readings now, ms. */
  c: { wall: number; mono: number };
  wall: () => number;
  monotonic: () => number;
  /** Time passes: both clocks move. */
  pass(ms: number): void;
  /** The wall clock is stepped (NTP, `date -s`, a VM resumed): the monotonic one is not. */
  step(ms: number): void;
}

/** Injected clocks: the wall clock (at {@linkcode T0}) and a monotonic one (at `mono`), moved by hand. */
export function clocks(mono = 1000): Clocks {
  const c = { wall: T0, mono };
  return {
    c,
    wall: () => c.wall,
    monotonic: () => c.mono,
    pass(ms: number) {
      c.wall += ms;
      c.mono += ms;
    },
    step(ms: number) {
      c.wall += ms;
    },
  };
}
