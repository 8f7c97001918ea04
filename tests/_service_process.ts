/**
 * The real service as a separate process (`deno run main.ts --listen` on a free port, or Node's
 * entry: `node lib/node/main.ts`), for tests in which several instances share one rate-limit store. Its operational events (JSON lines on stderr)
 * are kept for assertions.
 *
 * @module
 */

const ROOT = new URL("..", import.meta.url);
const MAIN = new URL("main.ts", ROOT).pathname;
const CONFIG = new URL("deno.json", ROOT).pathname;
const NODE_MAIN = new URL("lib/node/main.ts", ROOT).pathname;

/** Options of {@linkcode startService}. */
export interface StartOptions {
  /** The process's open-file limit (`ulimit -n`), when it must be lower than the test's. */
  descriptorLimit?: number;
  /** A module Deno runs before main.ts (`--preload`), such as a probe. */
  preload?: string;
  /**
   * A copy of the project to run instead (its `main.ts`), with this configuration file, without a
   * lock file: for tests that edit `static/` or map an import elsewhere.
   */
  copy?: { root: string; config: string };
  /**
   * The permission and unstable flags in place of the default ones (`--unstable-net --allow-net
   * --allow-read --allow-write --allow-env`), such as those `deno task compile` bakes into the binary.
   */
  flags?: string[];
  /**
   * Read events on stdout too: with OpenTelemetry on, the service's events go through `console`,
   * which prints info on stdout (main.ts, `event`).
   */
  stdoutEvents?: boolean;
  /**
   * Called with each event as it is read, before the process is said to listen: to act at a
   * moment of the start-up (such as a signal the moment a line is written), with `kill` to signal it.
   */
  onEvent?: (event: Record<string, unknown>, kill: (signal: Deno.Signal) => void) => void;
  /**
   * Run under libfaketime with this offset (`FAKETIME`, such as `+30s`): the process's wall clock
   * (Date.now) is that far from the machine's. Preloaded into the service itself, not through the
   * `faketime` wrapper, which does not pass SIGTERM on. The monotonic clock is left alone
   * (`DONT_FAKE_MONOTONIC=1`), as no real error of the wall clock moves it.
   */
  faketime?: string;
  /**
   * Run Node's entry (`lib/node/main.ts`) with this Node binary (`tests/_node.ts`) instead of Deno's
   * `main.ts`; `flags`, `copy` and `preload` are Deno's and ignored.
   */
  node?: string;
}

/** Where Debian's libfaketime is (package `faketime`). */
export const LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/** Why libfaketime cannot run here, or undefined. Throws in CI, which installs it. */
export function faketimeUnavailableReason(): string | undefined {
  try {
    if (Deno.statSync(LIBFAKETIME).isFile) return undefined;
  } catch {
    // Not installed.
  }
  if (Deno.env.get("CI") === "true") {
    throw new Error(`${LIBFAKETIME} is missing (apt-get install faketime)`);
  }
  return `${LIBFAKETIME} is missing (apt-get install faketime)`;
}

/** How long {@linkcode ServiceProcess.stop} waits for the exit before it kills and fails. */
const STOP_WAIT_MS = 45_000;

/**
 * How long {@linkcode ServiceProcess.stop} waits for the exit once the service has logged "stopped"
 * (main.ts then only calls `Deno.exit`). Deno 2.9.6 with OpenTelemetry on sometimes never returns
 * from that exit: its main thread parks for good in the telemetry flush while the exporter's thread
 * idles with nothing to do (seen in 4 of 66 services stopped here, one of 18 without libfaketime).
 */
const EXIT_AFTER_STOPPED_MS = 5_000;

/** A running service process. */
export interface ServiceProcess {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  /** The process id (the `deno` process itself, unless `descriptorLimit` put a shell before it). */
  pid: number;
  /** Every JSON event it wrote on stderr so far. */
  events: Record<string, unknown>[];
  /** Sends SIGTERM and waits for it to exit. */
  stop(): Promise<void>;
  /** Sends `signal` without waiting. */
  kill(signal: Deno.Signal): void;
  /** Settles with the exit code when the process has exited. */
  exited: Promise<number>;
}

/**
 * Starts the service with `env` (on top of a loopback, port-0, no-access-log base) and waits until it
 * logs that it listens, at most `timeoutMs`.
 */
export async function startService(
  env: Record<string, string>,
  timeoutMs = 20_000,
  options: StartOptions = {},
): Promise<ServiceProcess> {
  // `ulimit -n` in a shell that then becomes the service: Deno has no setrlimit of its own.
  const limit = options.descriptorLimit;
  const runtime = options.node ?? Deno.execPath();
  const command = limit === undefined ? runtime : "sh";
  const prefix = limit === undefined ? [] : ["-c", `ulimit -n ${limit} && exec "$0" "$@"`, runtime];
  const child = new Deno.Command(command, {
    args: options.node !== undefined ? [...prefix, NODE_MAIN] : [
      ...prefix,
      "run",
      "--config",
      options.copy?.config ?? CONFIG,
      ...(options.copy === undefined ? [] : ["--no-lock"]),
      // As deno task start: REUSE_PORT needs it.
      ...(options.flags ?? [
        "--unstable-net",
        "--allow-net",
        "--allow-read",
        "--allow-write",
        "--allow-env",
      ]),
      ...(options.preload === undefined ? [] : ["--preload", options.preload]),
      options.copy === undefined ? MAIN : `${options.copy.root}/main.ts`,
      "--listen",
    ],
    env: {
      PORT: "0",
      HOSTNAME: "127.0.0.1",
      PUBLIC_BASE_URL: "http://127.0.0.1",
      ACCESS_LOG: "false",
      NO_COLOR: "1",
      ...(options.faketime === undefined
        ? {}
        : { LD_PRELOAD: LIBFAKETIME, FAKETIME: options.faketime, DONT_FAKE_MONOTONIC: "1" }),
      ...env,
    },
    stdin: "null",
    stdout: options.stdoutEvents ? "piped" : "null",
    stderr: "piped",
  }).spawn();
  const events: Record<string, unknown>[] = [];
  const output: string[] = [];
  const { promise: address, resolve: listening } = Promise.withResolvers<string>();
  const readLines = async (stream: ReadableStream<Uint8Array<ArrayBuffer>>) => {
    let pending = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      pending += chunk;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      for (const line of lines) {
        output.push(line);
        let event: Record<string, unknown>;
        try {
          event = JSON.parse(line);
        } catch {
          continue;
        }
        events.push(event);
        options.onEvent?.(event, (signal) => child.kill(signal));
        if (event.message === "listening") listening(String(event.address).replace(/\/$/, ""));
      }
    }
    if (pending !== "") output.push(pending);
  };
  const reading = Promise.all([
    readLines(child.stderr),
    options.stdoutEvents ? readLines(child.stdout) : undefined,
  ]);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const url = await Promise.race([
    address,
    // The output is quoted once both pipes have ended: the exit can be seen before the last chunk
    // of stderr is read (CI once quoted nothing of a sentence the service had written).
    child.status.then(async (status) => {
      await reading;
      throw new Error(`service exited with ${status.code} before listening:\n${output.join("\n")}`);
    }),
    new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`service did not listen within ${timeoutMs} ms`)),
        timeoutMs,
      );
    }),
  ]).catch(async (error) => {
    clearTimeout(timer);
    try {
      child.kill("SIGKILL");
    } catch { /* already gone */ }
    await child.status;
    await reading;
    throw error;
  });
  clearTimeout(timer);
  return {
    url,
    pid: child.pid,
    events,
    kill: (signal) => child.kill(signal),
    exited: child.status.then((status) => status.code),
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch { /* already gone */ }
      // Bounded, so that a process that never exits fails its test instead of holding the suite;
      // sooner once it has said "stopped" (its own shutdown is over: only the runtime's exit is left).
      let exited = false;
      void child.status.then(() => exited = true);
      const started = Date.now();
      let stoppedAt: number | undefined;
      let hung: string | undefined;
      while (!exited) {
        if (stoppedAt === undefined && events.some((e) => e.message === "stopped")) {
          stoppedAt = Date.now();
        }
        if (stoppedAt !== undefined && Date.now() - stoppedAt > EXIT_AFTER_STOPPED_MS) {
          hung = `the service said "stopped" but did not exit within ${EXIT_AFTER_STOPPED_MS} ms`;
        } else if (Date.now() - started > STOP_WAIT_MS) {
          hung = `the service did not exit within ${STOP_WAIT_MS} ms of SIGTERM`;
        }
        if (hung !== undefined) break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      if (hung !== undefined) child.kill("SIGKILL");
      await child.status;
      await reading;
      if (hung !== undefined) throw new Error(hung);
    },
  };
}

/** The outcome of one request: status and, for errors, the error code. */
export interface Outcome {
  /** HTTP status. */
  status: number;
  /** `error.code` of an error body, if any. */
  code: string | undefined;
  /** The response's `RateLimit` header. */
  rateLimit: string | null;
}

/** Sends `GET /api/v1/platform` to `url` as the caller `ip` (the service trusts 127.0.0.1). */
export async function request(url: string, ip: string): Promise<Outcome> {
  const response = await fetch(`${url}/api/v1/platform`, { headers: { "x-forwarded-for": ip } });
  const body = await response.json();
  return {
    status: response.status,
    code: body?.error?.code,
    rateLimit: response.headers.get("ratelimit"),
  };
}

/** Sends `count` requests as `ip` to `url`, one after the other. */
export async function sequential(url: string, count: number, ip: string): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  for (let i = 0; i < count; i++) outcomes.push(await request(url, ip));
  return outcomes;
}

/** How many of `outcomes` were admitted (200). */
export function admitted(outcomes: readonly Outcome[]): number {
  return outcomes.filter((o) => o.status === 200).length;
}

/** `t=` of a `RateLimit` field: seconds until the caller's oldest counted request leaves. */
export function resetOf(outcome: Outcome): number {
  return Number(/;t=(\d+)/.exec(outcome.rateLimit ?? "")?.[1]);
}

/** Sends `count` concurrent requests as `ip`, spread round-robin over `urls`. */
export function burst(urls: readonly string[], count: number, ip: string): Promise<Outcome[]> {
  return Promise.all(
    Array.from({ length: count }, (_, i) => request(urls[i % urls.length]!, ip)),
  );
}
