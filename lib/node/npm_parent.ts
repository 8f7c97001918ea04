/**
 * `npm start` ends with its npm. npm runs the start script in a child process and, on SIGTERM or
 * SIGINT, passes the signal to that child and exits: package.json's `exec` makes the child this
 * process itself, so it hears the signal and stops as on any SIGTERM. Where npm is gone without
 * passing anything on (killed, or a shell between them that the signal ended), this process is
 * re-parented and would serve on, answering, with nothing left to stop it: so under npm (which sets
 * `npm_lifecycle_event`) the entry watches its parent, and stops when its parent process changes.
 *
 * @module
 */

import process from "node:process";

/**
 * How often the parent is looked at, in ms: a stop begins at most this long after npm is gone, and
 * a look is one system call.
 */
export const PARENT_POLL_MS = 500;

/** Options of {@linkcode watchNpmParent}. */
export interface ParentWatchOptions {
  /** The environment (`process.env` by default). */
  env?: Record<string, string | undefined>;
  /** The parent's process id now (`process.ppid` by default). */
  parent?: () => number;
  /** How often to look; {@linkcode PARENT_POLL_MS} by default. */
  pollMs?: number;
}

/**
 * Under `npm start`, calls `onGone` once when this process's parent changes (npm has exited); does
 * nothing when npm did not start it. The watch never keeps the process alive.
 *
 * @returns whether it watches
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * let parent = 100;
 * let gone = false;
 * const watching = watchNpmParent(() => gone = true, {
 *   env: { npm_lifecycle_event: "start" },
 *   parent: () => parent,
 *   pollMs: 5,
 * });
 * assert.equal(watching, true);
 * parent = 1; // npm exited: this process was re-parented
 * // The watch holds nothing alive: this timer keeps the example running meanwhile.
 * await new Promise((resolve) => setTimeout(resolve, 100));
 * assert.equal(gone, true);
 * assert.equal(watchNpmParent(() => {}, { env: {} }), false);
 * ```
 */
export function watchNpmParent(onGone: () => void, options: ParentWatchOptions = {}): boolean {
  const env = options.env ?? process.env;
  if (env.npm_lifecycle_event === undefined) return false;
  const parentOf = options.parent ?? (() => process.ppid);
  const first = parentOf();
  const timer = setInterval(() => {
    if (parentOf() === first) return;
    clearInterval(timer);
    onGone();
  }, options.pollMs ?? PARENT_POLL_MS);
  (timer as unknown as { unref?: () => void }).unref?.();
  return true;
}
