/**
 * Node's entry (`node lib/node/main.ts`, what `npm start` runs) as a child process of the Node that
 * runs the tests (`npm test`), with `node:` modules only: started on a free loopback port, its
 * events (JSON lines on stderr) and access log (stdout) kept, stopped with SIGTERM.
 *
 * @module
 */

import { spawn } from "node:child_process";
import process from "node:process";
import type { Readable } from "node:stream";

const MAIN = new URL("../../lib/node/main.ts", import.meta.url).pathname;

/** A running entry. */
export interface NodeEntry {
  /** The port it listens on. */
  port: number;
  /** Its events so far. */
  events: Record<string, unknown>[];
  /** Its access-log lines so far. */
  lines: Record<string, unknown>[];
  /** Resolves once an event `test` accepts has come, or rejects after `timeoutMs`. */
  waitForEvent(test: (event: Record<string, unknown>) => boolean, timeoutMs: number): Promise<void>;
  /** Resolves once `condition` holds, checked at each line written, or rejects after `timeoutMs`. */
  waitFor(condition: () => boolean, timeoutMs: number): Promise<void>;
  /** Sends SIGTERM and resolves with the exit code. */
  stop(): Promise<number | null>;
}

/** How long the entry may take to listen, in ms (a second alone; more with two suites at once). */
const LISTEN_WITHIN_MS = 20_000;

/** Starts the entry on Node (`process.execPath`) with `env` over a loopback, port-0 base. */
export function startNodeEntry(env: Record<string, string>): Promise<NodeEntry> {
  const child = spawn(process.execPath, [MAIN], {
    env: {
      PATH: process.env.PATH ?? "",
      PORT: "0",
      HOSTNAME: "127.0.0.1",
      PUBLIC_BASE_URL: "http://127.0.0.1",
      ACCESS_LOG: "false",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const events: Record<string, unknown>[] = [];
  const lines: Record<string, unknown>[] = [];
  const waiters = new Set<() => void>();
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  readLines(child.stderr, (line) => {
    events.push(JSON.parse(line));
    for (const waiter of waiters) waiter();
  });
  readLines(child.stdout, (line) => {
    lines.push(JSON.parse(line));
    for (const waiter of waiters) waiter();
  });
  const waitFor = (condition: () => boolean, timeoutMs: number) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (!condition()) return;
        waiters.delete(check);
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        reject(new Error(`not within ${timeoutMs} ms; events: ${JSON.stringify(events)}`));
      }, timeoutMs);
      waiters.add(check);
      exited.then(() => check());
      check();
    });
  const waitForEvent = (test: (event: Record<string, unknown>) => boolean, timeoutMs: number) =>
    waitFor(() => events.some(test), timeoutMs);
  const stop = () => {
    child.kill("SIGTERM");
    return exited;
  };
  return waitForEvent((event) => event.message === "listening", LISTEN_WITHIN_MS).then(
    () => {
      const address = String(events.find((event) => event.message === "listening")!.address);
      return { port: Number(new URL(address).port), events, lines, waitForEvent, waitFor, stop };
    },
    async (error) => {
      await stop();
      throw error;
    },
  );
}

/** Calls `onLine` with each whole line `stream` writes. */
function readLines(stream: Readable, onLine: (line: string) => void): void {
  let pending = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => {
    pending += chunk;
    let end: number;
    while ((end = pending.indexOf("\n")) !== -1) {
      const line = pending.slice(0, end);
      pending = pending.slice(end + 1);
      if (line.startsWith("{")) onLine(line);
    }
  });
}
