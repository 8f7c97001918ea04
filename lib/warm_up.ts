/**
 * The warm-up: after start-up, enable compression and build every representation and compressed
 * variant in the background, so that no later request waits for one. Until a representation is built
 * (and without a warm-up) the first request that needs it builds it; until its compressed variants
 * are built, a request for br or gzip gets the identity variant.
 *
 * It does not load `npm:negotiator`: the common `Accept` and `Accept-Encoding` values are answered
 * without it, and loading it (a CommonJS package, so Node compatibility with it) for the rare request
 * that needs it would keep megabytes resident in every process that never sees one
 * (tests/bench/README.md, "The hot caller and memory"). Such a request loads it itself
 * (`handler.ts`).
 *
 * @module
 */

import { enableCompression, type Representation } from "./http/representation.ts";

/** Options of {@linkcode warmUp}. */
export interface WarmUpOptions {
  /**
   * How long after start-up the handler starts the warm-up, in ms (default `WARM_UP_DELAY_MS` of
   * `handler.ts`, which imports this module only then). Each step runs on the event loop: a request
   * arriving during a step waits for it, so the steps wait until the first requests of a cold start
   * are answered.
   */
  delayMs?: number;
  /** Called once every variant is built, with how many were built and the ms it took in all. */
  onDone?: (report: { variants: number; ms: number }) => void;
  /** Receives a failure to build a representation; the warm-up goes on with the next one. */
  onError?: (error: unknown) => void;
  /** Stops the warm-up after the step under way (the service is shutting down); `onDone` is not called. */
  signal?: AbortSignal;
}

/**
 * Builds every representation of `paths` and its compressed variants, one step per macrotask so
 * that requests arriving meanwhile are answered between steps, starting now.
 */
export function warmUp(
  paths: Iterable<{ prepare(): Promise<void>; representations(): Representation[] }>,
  options: WarmUpOptions,
): void {
  const steps: Array<() => void | Promise<void>> = [];
  let variants = 0;
  for (const path of paths) {
    steps.push(() => {
      for (const representation of path.representations()) {
        variants++;
        steps.push(async () => {
          await representation.compress();
          variants += 2;
        });
      }
    });
  }
  const started = performance.now();
  const next = async () => {
    if (options.signal?.aborted) return;
    const step = steps.shift();
    if (step === undefined) {
      options.onDone?.({ variants, ms: performance.now() - started });
      return;
    }
    try {
      await step();
    } catch (error) {
      options.onError?.(error);
    }
    setTimeout(next, 0);
  };
  // Pages need the Markdown renderer, Markdown representations their token count (`pages/tokens.ts`,
  // whose counter is made once for all of them, since they are built at once, and then let go),
  // and every path its representations (ETags from Web Crypto): build them first (a failure is
  // reported, and the path's built representations are still compressed).
  // Enabled once every path is built, so that their bodies are compressed one step at a time: each
  // compressor holds megabytes while it runs, and paths are prepared all at once.
  const prepared = [...paths].map((path) =>
    path.prepare().catch((error) => options.onError?.(error))
  );
  void Promise.all(prepared).then(() => {
    enableCompression();
    return next();
  });
}
