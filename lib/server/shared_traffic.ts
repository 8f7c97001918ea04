/**
 * The workers of one `deno serve --parallel` process, found by each other, so that the service can
 * warn that each counts its callers in its own memory store (a caller gets the limit once per
 * worker; the warnings of the other such cases, `REUSE_PORT=true` and Deno Deploy, need no more than
 * the settings: `lib/lifecycle/warnings.ts`). Imported only under `deno serve` with the memory store
 * (lib/README.md, "Cold start").
 *
 * What a process can know (Deno 2.9): `deno serve --parallel` tells a worker neither that it is one
 * of several nor how many (the count stays inside the runtime's bootstrap, `runtime/js/99_main.js`),
 * but its workers are threads of one process whose `BroadcastChannel`s reach each other (one
 * in-memory channel shared by the worker factory, `cli/lib/worker.rs`), which
 * {@linkcode watchServeWorkers} uses. Processes on other machines, or several `deno run` processes
 * behind one load balancer, cannot be told apart from one process alone: the docs say so where the
 * store is chosen.
 *
 * @module
 */

/** The channel the workers of one `deno serve --parallel` process find each other on. */
const WORKERS_CHANNEL = "discovery:serve-workers";

/** How long a worker listens for the others after it started. */
export const WORKERS_WAIT_MS = 1000;

/** Options of {@linkcode watchServeWorkers}. */
export interface WatchOptions {
  /** Called at most once, in one worker only: how many workers this process runs. */
  onSeveral(workers: number): void;
  /** How long to listen for the other workers; {@linkcode WORKERS_WAIT_MS} by default. */
  waitMs?: number;
  /** The channel's name; {@linkcode WORKERS_CHANNEL} by default. */
  channel?: string;
}

/**
 * Finds the other workers of this process (`deno serve --parallel` evaluates the main module once
 * per worker, each in its own thread): each says hello on a `BroadcastChannel` and answers the
 * others' hellos; after `waitMs` the worker with the smallest id among those it heard of calls
 * `onSeveral` with the count, so the process says it once. Nothing happens in a process of one.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const heard: number[] = [];
 * const channel = `example-${crypto.randomUUID()}`;
 * // Two "workers" in one isolate behave like two threads of one process.
 * const done = [
 *   watchServeWorkers({ onSeveral: (n) => heard.push(n), waitMs: 100, channel }),
 *   watchServeWorkers({ onSeveral: (n) => heard.push(n), waitMs: 100, channel }),
 * ];
 * await Promise.all(done);
 * assert.deepEqual(heard, [2]);
 * ```
 */
export function watchServeWorkers(options: WatchOptions): Promise<void> {
  const id = crypto.randomUUID();
  const others = new Set<string>();
  const channel = new BroadcastChannel(options.channel ?? WORKERS_CHANNEL);
  channel.onmessage = (message: MessageEvent) => {
    const data = message.data as { kind?: unknown; id?: unknown } | null;
    if (typeof data?.id !== "string" || data.id === id) return;
    others.add(data.id);
    if (data.kind === "hello") channel.postMessage({ kind: "here", id });
  };
  channel.postMessage({ kind: "hello", id });
  return new Promise((resolve) => {
    setTimeout(() => {
      channel.close();
      if (others.size > 0 && [...others].every((other) => id < other)) {
        options.onSeveral(others.size + 1);
      }
      resolve();
    }, options.waitMs ?? WORKERS_WAIT_MS);
  });
}
