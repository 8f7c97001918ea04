/**
 * Where several processes or isolates share one caller's traffic while each counts with its own
 * memory store, a caller gets the limit once per process: the one warning line start-up prints in
 * each case the service can recognise. Imported by `main.ts` only with the memory store and one of
 * those cases possible (lib/README.md, "Cold start").
 *
 * What a process can know (Deno 2.9): `REUSE_PORT=true` is its own setting, whose purpose is a
 * second process on the port; Deno Deploy sets `DENO_DEPLOY=true` and runs as many isolates as it
 * chooses; `deno serve --parallel` tells a worker neither that it is one of several nor how many
 * (the count stays inside the runtime's bootstrap, `runtime/js/99_main.js`), but its workers are
 * threads of one process whose `BroadcastChannel`s reach each other (one in-memory channel shared by
 * the worker factory, `cli/lib/worker.rs`), which {@linkcode watchServeWorkers} uses. Processes on
 * other machines, or several `deno run` processes behind one load balancer, cannot be told apart
 * from one process alone: the docs say so where the store is chosen.
 *
 * @module
 */

/** The settings that decide whether a warning is due. */
export interface SharedTrafficInput {
  /** `RATE_LIMIT_STORE`. */
  store: "memory" | "kv" | "redis" | "sqlite";
  /** `REUSE_PORT`. */
  reusePort: boolean;
  /** Whether this is Deno Deploy (`DENO_DEPLOY=true`). */
  onDenoDeploy: boolean;
}

/**
 * The warning for a setting that shares one caller's traffic between processes or isolates that
 * each count alone, or undefined when there is none to give.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const warning = sharedTrafficWarning({ store: "memory", reusePort: true, onDenoDeploy: false });
 * assert.match(warning!, /set RATE_LIMIT_STORE=kv/);
 * assert.equal(
 *   sharedTrafficWarning({ store: "kv", reusePort: true, onDenoDeploy: false }),
 *   undefined,
 * );
 * ```
 */
export function sharedTrafficWarning(input: SharedTrafficInput): string | undefined {
  if (input.store !== "memory") return undefined;
  if (input.onDenoDeploy) {
    return 'the memory store on Deno Deploy: every isolate (one per region at least, more under load) counts its callers on its own, so a caller gets the limit once per isolate; attach a Deno KV database to the app (Databases, Assign) and set RATE_LIMIT_STORE=kv (lib/limit/README.md, "Which store to pick")';
  }
  if (input.reusePort) {
    return 'REUSE_PORT=true with the memory store: each process on the port counts its callers on its own, and a process that takes the port over starts every count at zero; set RATE_LIMIT_STORE=kv with KV_PATH naming one file both processes open (deploy/README.md, "One port")';
  }
  return undefined;
}

/** The warning for `workers` workers of `deno serve --parallel`, each with its memory store. */
export function parallelWorkersWarning(workers: number): string {
  return `deno serve --parallel runs ${workers} workers, each counting its callers in its own memory store, so a caller gets up to ${workers} times the limit; set RATE_LIMIT_STORE=kv with RATE_LIMIT_CONSISTENCY=local-first (deno task start:parallel does; lib/limit/README.md, "Several workers on one machine")`;
}

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
