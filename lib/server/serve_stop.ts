/**
 * A stop signal that no worker of `deno serve --parallel` misses. Deno 2.9.6 wires SIGTERM and
 * SIGINT to each worker's graceful shutdown only once that worker's main module has been evaluated
 * (`registerDeclarativeServer`, ext/http/00_serve.ts), and the process ends when every worker has.
 * A signal that arrives while a worker is still starting (main.ts awaits its configuration, store
 * and telemetry first) reaches the workers already serving, which stop, and never the one starting,
 * which then serves on: the process never exits (seen in 1 of 5 stops sent as soon as the port
 * answered, OpenTelemetry on or off). So each worker listens for the signal from the start of
 * main.ts and tells the others on a `BroadcastChannel` (the workers are threads of one process:
 * `shared_traffic.ts`); a worker told before its runtime took its default export sends the signal
 * to the process again once it has (`node:process`'s `kill` of its own pid: no `--allow-run`), and
 * its runtime then stops it gracefully like the others.
 *
 * A worker whose main.ts begins later still than that (the channel closes
 * {@linkcode STOP_LINGER_MS} after a stop, since an open channel keeps a worker's event loop, and so
 * the process, alive) finds the stop in the process's environment: the first worker to stop sets
 * {@linkcode STOP_MARKER} (the environment is the process's, shared by its threads), and a worker
 * that joins the relay later reads it. Without `--allow-env` for it, the channel's second is the
 * bound.
 *
 * @module
 */

/** The channel the workers of one `deno serve --parallel` process tell each other of a stop on. */
const STOP_CHANNEL = "discovery:serve-stop";

/**
 * The environment variable a stopping worker sets to the signal, for the workers that join the
 * relay once the channel is closed. Named apart from the configuration's (`ENV_NAMES`).
 */
export const STOP_MARKER = "DISCOVERY_SERVE_STOPPING";

/**
 * How long a stopping worker keeps answering the workers that start after its signal, in ms (an
 * open channel keeps a worker's event loop, and so the process, alive).
 */
export const STOP_LINGER_MS = 1000;

/** Options of {@linkcode relayServeStop}. */
export interface RelayOptions {
  /** The channel's name; {@linkcode STOP_CHANNEL} by default. */
  channel?: string;
  /** How long to answer late workers after the signal; {@linkcode STOP_LINGER_MS} by default. */
  lingerMs?: number;
  /** Sends `signal` to the process again; `process.kill` of its own pid by default. */
  raise?: (signal: Deno.Signal) => void;
  /** Whether to listen for the process's signals (default true; examples feed `signalled`). */
  listen?: boolean;
  /** Whether to set and read {@linkcode STOP_MARKER} (default true; examples keep it apart). */
  marker?: boolean;
}

/** One worker's part of the relay. */
export interface StopRelay {
  /** Call once the runtime serves this worker's default export (its signal handler is wired). */
  ready(): void;
  /** Call when this worker receives `signal` itself (done by the relay's own listeners). */
  signalled(signal: Deno.Signal): void;
}

type Message = { kind: "hello" } | { kind: "stop"; signal: Deno.Signal };

/**
 * Joins this worker to the stop relay. Until {@linkcode StopRelay.ready}, a stop told by another
 * worker is kept; at `ready` (or when told after it, before a signal of its own) the signal is
 * raised again for this worker's runtime.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const channel = `example-${crypto.randomUUID()}`;
 * const raised: string[] = [];
 * const options = { channel, lingerMs: 50, listen: false, marker: false };
 * const serving = relayServeStop({ ...options, raise: (s) => raised.push(`serving ${s}`) });
 * serving.ready();
 * const starting = relayServeStop({ ...options, raise: (s) => raised.push(`starting ${s}`) });
 * serving.signalled("SIGTERM");
 * await new Promise((resolve) => setTimeout(resolve, 20));
 * assert.deepEqual(raised, []); // the starting worker waits for its runtime
 * starting.ready();
 * assert.deepEqual(raised, ["starting SIGTERM"]);
 * await new Promise((resolve) => setTimeout(resolve, 100)); // the channels close
 * ```
 */
export function relayServeStop(options: RelayOptions = {}): StopRelay {
  const raise = options.raise ?? raiseInProcess;
  const lingerMs = options.lingerMs ?? STOP_LINGER_MS;
  let channel: BroadcastChannel | undefined;
  // The stop this worker is in (its own signal or one it was told of), and one its runtime missed.
  let stopping: Deno.Signal | undefined;
  let missed: Deno.Signal | undefined;
  let ready = false;
  const close = () => {
    channel?.close();
    channel = undefined;
  };
  // Open from the start until `lingerMs` after `ready` or after a stop: an answer to this worker's
  // hello may come after `ready`, and late workers' hellos are answered.
  const open = () => {
    if (channel) return channel;
    channel = new BroadcastChannel(options.channel ?? STOP_CHANNEL);
    channel.onmessage = ({ data }: MessageEvent<Message>) => {
      if (data?.kind === "hello" && stopping !== undefined) {
        channel?.postMessage({ kind: "stop", signal: stopping });
      } else if (data?.kind === "stop") {
        stop(data.signal === "SIGINT" ? "SIGINT" : "SIGTERM", true);
      }
    };
    return channel;
  };
  const marker = options.marker ?? true;
  const stop = (signal: Deno.Signal, told: boolean) => {
    if (stopping !== undefined) return;
    stopping = signal;
    if (marker) markStop(signal);
    open().postMessage({ kind: "stop", signal });
    setTimeout(close, lingerMs);
    // Told by another worker: this one's runtime did not see it. Signalled before `ready`: it
    // was not listening yet.
    if (told && ready) raise(signal);
    else if (!ready) missed = signal;
  };
  open().postMessage({ kind: "hello" });
  // A stop made before this worker joined, the channel closed since.
  const marked = marker ? markedStop() : undefined;
  if (marked !== undefined) stop(marked, true);
  if (options.listen ?? true) listenForStop((signal) => stop(signal, false));
  return {
    ready() {
      if (ready) return;
      ready = true;
      if (missed !== undefined) raise(missed);
      // From here this worker hears signals itself: the channel stays for answers to its hello
      // still on their way, and closes (under `deno run` without `--listen`, nothing else holds
      // the process).
      const answered = setTimeout(() => stopping === undefined && close(), lingerMs);
      Deno.unrefTimer(answered);
    },
    signalled: (signal) => stop(signal, false),
  };
}

/**
 * The relay main.ts joins: under `deno serve`, where a stop signal that comes while this worker
 * starts must not be lost. Not with `--listen`, which stops the process itself
 * (`lib/lifecycle/stop.ts`), nor on Deno Deploy, which stops through that same path and whose
 * `BroadcastChannel` reaches the app's other isolates; nor in a module that is not the main one.
 */
export function relayWhenServed(main: boolean): StopRelay | undefined {
  if (!main || Deno.args.includes("--listen") || onDenoDeploy()) return undefined;
  return relayServeStop();
}

/** Whether this is Deno Deploy, read before the configuration (false where env cannot be read). */
function onDenoDeploy(): boolean {
  try {
    return Deno.env.get("DENO_DEPLOY") === "true";
  } catch {
    return false;
  }
}

/**
 * Whether this process may read and set {@linkcode STOP_MARKER} without asking (asking would
 * prompt on a terminal).
 */
function mayMark(): boolean {
  try {
    return Deno.permissions.querySync({ name: "env", variable: STOP_MARKER }).state === "granted";
  } catch {
    return false;
  }
}

/** Sets {@linkcode STOP_MARKER} to `signal`, where the process may. */
function markStop(signal: Deno.Signal): void {
  // Without --allow-env for it, the channel alone tells the workers that start within its linger.
  if (mayMark()) Deno.env.set(STOP_MARKER, signal);
}

/** The signal of a stop {@linkcode STOP_MARKER} holds, if any. */
function markedStop(): Deno.Signal | undefined {
  const signal = mayMark() ? Deno.env.get(STOP_MARKER) : undefined;
  return signal === "SIGTERM" || signal === "SIGINT" ? signal : undefined;
}

/**
 * Sends `signal` to this process: `node:process`'s `kill` of its own pid, loaded only then (main.ts
 * loads no `node:` module before its first response: lib/README.md, "Cold start").
 */
function raiseInProcess(signal: Deno.Signal): void {
  void import("node:process").then(({ default: process }) => process.kill(process.pid, signal));
}

/** SIGTERM and SIGINT, where the platform has them, reported to `onSignal`. */
function listenForStop(onSignal: (signal: Deno.Signal) => void): void {
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    try {
      Deno.addSignalListener(signal, () => onSignal(signal));
    } catch {
      // No signal support here: the runtime stops as it will.
    }
  }
}
