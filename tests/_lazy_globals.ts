/**
 * The globals Deno loads lazily from modules outside its start-up snapshot, and a spy on their reads
 * for in-process tests. `setTimeout`, `setInterval` and the other timers come from `node:timers`
 * (Node's errors, async hooks and timers: about 5 ms the first time one is read), `Buffer` and
 * `process` from Node compatibility, `atob` and `btoa` from their own module. What the service does
 * before its first response must read none of them (lib/README.md, "Cold start").
 *
 * @module
 */

/** The globals whose first read loads a module the runtime keeps out of its start-up snapshot. */
export const LAZY_GLOBALS = [
  "setTimeout",
  "setInterval",
  "clearTimeout",
  "clearInterval",
  "setImmediate",
  "clearImmediate",
  "Buffer",
  "process",
  "atob",
  "btoa",
] as const;

/**
 * Runs `body` with each of {@linkcode LAZY_GLOBALS} behind a getter that records that it was read
 * (and still returns it), then restores them.
 *
 * @returns the names read, in the order first read
 */
export function lazyGlobalsReadBy(body: () => void): string[] {
  const read: string[] = [];
  const saved = LAZY_GLOBALS.map((name) =>
    [name, Object.getOwnPropertyDescriptor(globalThis, name)] as const
  );
  for (const [name, descriptor] of saved) {
    Object.defineProperty(globalThis, name, {
      configurable: true,
      get() {
        if (!read.includes(name)) read.push(name);
        return descriptor?.get ? descriptor.get.call(globalThis) : descriptor?.value;
      },
    });
  }
  try {
    body();
  } finally {
    for (const [name, descriptor] of saved) {
      if (descriptor) Object.defineProperty(globalThis, name, descriptor);
    }
  }
  return read;
}
