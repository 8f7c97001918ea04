/**
 * The image `discovery` run as an operator runs it, for tests/container/container_test.ts: a
 * container started attached (its stdout and stderr read apart, line by line), ready once the
 * service's JSON `listening` event says so, stopped with the engine's own `stop`, and removed.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type Engine, engine, engineOk, ULIMITS } from "../../deploy/container/engine.ts";
import { IMAGE } from "../../deploy/container/build.ts";

/** How long a container may take to say `listening`: the service starts in about 0.3 s. */
const START_WAIT_MS = 20_000;

/** The root file system read-only and no writable place at all (podman adds tmpfs otherwise). */
export function readOnly(which: Engine): string[] {
  return which.name === "podman" ? ["--read-only", "--read-only-tmpfs=false"] : ["--read-only"];
}

/** A running container of {@linkcode IMAGE}. */
export interface Container {
  /** Its name. */
  name: string;
  /** Its stdout lines so far (the access log). */
  stdout: string[];
  /** Its stderr lines so far (the service's events). */
  stderr: string[];
  /** `http://127.0.0.1:<port>` where its port 8000 is published, when it is. */
  url?: string;
  /** Resolves when a line of stderr is a JSON event with this message. */
  event(message: string, timeoutMs?: number): Promise<void>;
  /** Stops it with `<engine> stop` and waits for its exit: the exit code and the stop's duration. */
  stop(): Promise<{ code: number; ms: number }>;
  /** Removes it (after a stop; also when the test failed before stopping). */
  remove(): Promise<void>;
}

/** Reads `stream` line by line into `lines`, calling `onLine` for each. */
async function readLines(
  stream: ReadableStream<Uint8Array<ArrayBuffer>>,
  lines: string[],
  onLine: () => void,
): Promise<void> {
  let pending = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    const parts = (pending + chunk).split("\n");
    pending = parts.pop()!;
    lines.push(...parts);
    onLine();
  }
  if (pending !== "") lines.push(pending);
  onLine();
}

/** The message of `line` when it is a JSON event. */
function messageOf(line: string): unknown {
  try {
    return (JSON.parse(line) as { message?: unknown }).message;
  } catch {
    return undefined;
  }
}

/**
 * Starts {@linkcode IMAGE} attached, with `PUBLIC_BASE_URL` as the only variable given and
 * `flags` before the image, and waits for its `listening` event. `publish` maps its port 8000 to
 * an ephemeral port of 127.0.0.1.
 */
export async function startContainer(
  which: Engine,
  options: { flags: string[]; publish: boolean; baseUrl: string },
): Promise<Container> {
  const name = `discovery-test-${crypto.randomUUID().slice(0, 8)}`;
  const args = ["run", "--name", name, ...ULIMITS, ...options.flags];
  if (options.publish) args.push("--publish", "127.0.0.1::8000");
  args.push("--env", `PUBLIC_BASE_URL=${options.baseUrl}`, IMAGE);
  const child = new Deno.Command(which.command[0]!, {
    args: [...which.command.slice(1), ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stdout: string[] = [];
  const stderr: string[] = [];
  const waiters = new Set<() => void>();
  const wake = () => waiters.forEach((waiter) => waiter());
  const reading = Promise.all([
    readLines(child.stdout, stdout, wake),
    readLines(child.stderr, stderr, wake),
  ]);
  const status = child.status;
  let ended = false;
  status.then(() => (ended = true, wake()));

  const event = (message: string, timeoutMs = START_WAIT_MS) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (stderr.some((line) => messageOf(line) === message)) done(resolve);
        else if (ended) done(() => reject(new Error(`${name} ended before "${message}"`)));
      };
      const timer = setTimeout(
        () => done(() => reject(new Error(`no "${message}" from ${name} in ${timeoutMs} ms`))),
        timeoutMs,
      );
      const done = (settle: () => void) => {
        clearTimeout(timer);
        waiters.delete(check);
        settle();
      };
      waiters.add(check);
      check();
    });

  const remove = async () => {
    await engine(which, ["rm", "--force", name]);
    await status;
    await reading;
  };
  try {
    await event("listening");
  } catch (error) {
    await remove();
    throw new Error(`${(error as Error).message}:\n${[...stdout, ...stderr].join("\n")}`);
  }
  const container: Container = {
    name,
    stdout,
    stderr,
    event,
    remove,
    async stop() {
      const start = performance.now();
      await engineOk(which, ["stop", name]);
      const { code } = await status;
      const ms = performance.now() - start;
      await reading;
      return { code, ms };
    },
  };
  if (options.publish) {
    try {
      const port = (await engineOk(which, ["port", name, "8000"])).trim().split("\n")[0]!;
      assert.match(port, /^127\.0\.0\.1:\d+$/, `${which.name} port ${name} 8000`);
      container.url = `http://${port}`;
    } catch (error) {
      await remove();
      throw error;
    }
  }
  return container;
}
