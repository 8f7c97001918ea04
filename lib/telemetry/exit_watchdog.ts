/**
 * A bound on the exit of a process that exports OpenTelemetry. `Deno.exit` shuts Deno's span, log
 * and meter exporters down on the main thread before the process ends (ext/telemetry/lib.rs,
 * `before_exit`), and Deno 2.9.6 sometimes never returns from it: with a collector that accepts and
 * never answers while periodic exports are timing out, and now and then with one that answers
 * (deploy/README.md, "Shutdown"). Nothing on the main thread can run then, so the bound lives on a
 * thread of its own: a worker, armed just before the exit, that writes one sentence on stderr and
 * kills the process (`node:process`'s `kill` of its own pid: the one way out of a worker that needs
 * no `--allow-run`; `process.abort()` left the process standing, dumping its core) if it is still
 * there when the bound is over. An exit that ends in time ends the worker with it.
 *
 * @module
 */

/** What the watchdog worker runs: told the bound and the sentence, it arms, says so, and waits. */
const WATCHDOG_SOURCE = `
import process from "node:process";
self.onmessage = ({ data }) => {
  setTimeout(() => {
    Deno.stderr.writeSync(new TextEncoder().encode(data.line));
    process.kill(process.pid, "SIGKILL");
  }, data.ms);
  self.postMessage("armed");
};
`;

/**
 * The JSON event line the watchdog writes when it ends the process, as the service's events are.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const line = watchdogLine(2500, new Date(0));
 * assert.equal(JSON.parse(line).level, "error");
 * assert.ok(line.endsWith("\n"));
 * ```
 */
export function watchdogLine(ms: number, now: Date = new Date()): string {
  return `${
    JSON.stringify({
      time: now.toISOString(),
      level: "error",
      message:
        "the exit's last OpenTelemetry exports did not end in time: killing the process (SIGKILL) without them",
      boundMs: ms,
    })
  }\n`;
}

/**
 * Arms the watchdog: resolves once a worker will end the process `ms` from now unless it has exited
 * by then. Call it right before `Deno.exit`. Where no worker can be made, it resolves at once: the
 * exit is then as unbounded as the runtime's.
 */
export async function armExitWatchdog(ms: number): Promise<void> {
  let worker: Worker;
  let url: string | undefined;
  try {
    url = URL.createObjectURL(new Blob([WATCHDOG_SOURCE], { type: "text/javascript" }));
    worker = new Worker(url, { type: "module" });
  } catch {
    if (url !== undefined) URL.revokeObjectURL(url);
    return;
  }
  const armed = new Promise<void>((resolve) => {
    worker.onmessage = () => resolve();
    worker.onerror = (error) => {
      error.preventDefault();
      resolve();
    };
  });
  worker.postMessage({ ms, line: watchdogLine(ms) });
  // Bounded too: a worker that does not start in time leaves the exit as it was.
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([armed, new Promise((resolve) => timer = setTimeout(resolve, ARM_WAIT_MS))]);
  clearTimeout(timer);
  URL.revokeObjectURL(url);
}

/** The longest the exit waits for the watchdog to start, in ms. */
const ARM_WAIT_MS = 1000;
