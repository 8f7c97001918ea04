/**
 * Logs never block the service (lib/lifecycle/line_writer.ts), on Deno (`main.ts --listen`) and on
 * Node 24 (`lib/node/main.ts`): with stdout (the access log on) and stderr each a pipe nobody reads,
 * the service keeps answering; when the pipes are read again, what was dropped is said; and a stop
 * while stdout is still stuck ends within the stop's deadline, saying so.
 *
 * Each pipe is a FIFO that the test holds open for reading and writing (so neither end blocks while
 * opening, and the test reads it later); stderr's is filled before the service starts, so that
 * every event it writes meets a full pipe. Slow for a unit test (a service process per case and
 * 12,000 requests): what it guards is a whole process's behaviour on real pipes.
 *
 * @module
 */

import assert from "node:assert/strict";
import { exchange, getHead } from "../_keep_alive_load.ts";
import { ensureNodeModules, nodeBinary } from "../_node.ts";
import { freePort } from "../_redis.ts";

const ROOT = new URL("../..", import.meta.url).pathname;

/**
 * Requests sent while both pipes are stuck: their access log (about 125 characters a line) is more
 * than the pipe and the writer's queue hold (64 KiB and `MAX_PENDING_CHARS`, about 9,000 lines), so
 * lines are dropped.
 */
const REQUESTS = 12_000;
/** Keep-alive connections they are sent on. */
const CONNECTIONS = 8;
/**
 * The most the requests may take: a few seconds unloaded, ten times that on a busy machine; a
 * writer that waits for the pipe never answers them.
 */
const ANSWERED_WITHIN_MS = 60_000;
/** A pipe's capacity on Linux (16 pages): what fills stderr's before the service starts. */
const PIPE_CAPACITY = 65_536;

/** A FIFO held open for reading and writing by the test: a pipe the test reads when it chooses. */
interface Fifo {
  path: string;
  file: Deno.FsFile;
}

async function fifo(dir: string, name: string): Promise<Fifo> {
  const path = `${dir}/${name}`;
  const made = await new Deno.Command("mkfifo", { args: [path] }).output();
  assert.ok(made.success, "mkfifo");
  // O_RDWR: opening a FIFO so does not wait for the other end (Linux).
  return { path, file: await Deno.open(path, { read: true, write: true }) };
}

/** A reader of a FIFO from now on. */
interface FifoReader {
  /** Waits until `done` holds for what was read, at most `ms`; what was read. */
  until(done: (text: string) => boolean, ms: number): Promise<string>;
  /** Stops reading. */
  stop(): Promise<void>;
}

/**
 * Reads `pipe` from now on with `cat` (Deno reads a FIFO of its own on the main thread, which would
 * stop the test with the service's pipe).
 */
function readFifo(pipe: Fifo): FifoReader {
  const cat = new Deno.Command("cat", { args: [pipe.path], stdout: "piped", stderr: "null" })
    .spawn();
  let text = "";
  const reading = (async () => {
    for await (const chunk of cat.stdout.pipeThrough(new TextDecoderStream())) text += chunk;
  })();
  return {
    async until(done, ms) {
      const deadline = Date.now() + ms;
      while (!done(text) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      return text;
    },
    async stop() {
      try {
        cat.kill("SIGKILL");
      } catch { /* already gone */ }
      await cat.status;
      await reading;
    },
  };
}

/** The JSON lines of `text` (a FIFO also holds the filler and whatever else was written). */
function jsonLines(text: string): Record<string, unknown>[] {
  return text.split("\n").flatMap((line) => {
    try {
      const value = JSON.parse(line);
      return typeof value === "object" && value !== null ? [value] : [];
    } catch {
      return [];
    }
  });
}

/** The dropped-lines events of `stream` in `stderr`'s text. */
function droppedNotes(stderr: string, stream: string) {
  return jsonLines(stderr).filter((e) =>
    e.stream === stream && typeof e.dropped === "number" && /lines dropped/.test(String(e.message))
  );
}

/**
 * Sends `count` GETs over `connections` keep-alive connections, giving up after `ms` (the
 * connections are closed then, so that a service that never answers ends the load); how many were
 * answered 200.
 */
async function load(port: number, count: number, connections: number, ms: number) {
  let answered = 0;
  let sent = 0;
  const open = new Set<Deno.Conn>();
  let expired = false;
  const timer = setTimeout(() => {
    expired = true;
    for (const conn of open) conn.close();
    open.clear();
  }, ms);
  const connect = async () => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    open.add(conn);
    return conn;
  };
  const close = (conn: Deno.Conn) => {
    if (open.delete(conn)) conn.close();
  };
  await Promise.all(Array.from({ length: connections }, async () => {
    let conn = await connect();
    try {
      while (sent < count && !expired) {
        sent++;
        const response = await exchange(conn, getHead("/api/v1/platform")).catch(() => undefined);
        if (response?.status === 200) answered++;
        if (!expired && (response === undefined || response.close)) {
          close(conn);
          conn = await connect();
        }
      }
    } finally {
      close(conn);
    }
  }));
  clearTimeout(timer);
  return answered;
}

/** Waits until `port` accepts connections (the service's "listening" is in a pipe not read yet). */
async function accepting(port: number, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (true) {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

type Runtime = { name: string; command: (port: number) => string[] };

const DENO: Runtime = {
  name: "Deno main.ts --listen",
  command: () => [
    Deno.execPath(),
    "run",
    "--config",
    `${ROOT}deno.json`,
    "--allow-net",
    "--allow-read",
    "--allow-env",
    `${ROOT}main.ts`,
    "--listen",
  ],
};

async function nodeRuntime(): Promise<Runtime> {
  await ensureNodeModules();
  const node = await nodeBinary(24);
  return { name: "Node 24", command: () => [node, `${ROOT}lib/node/main.ts`] };
}

/** A service whose stdout and stderr are the FIFOs `out` and `err`, started on `port`. */
function spawnWith(runtime: Runtime, port: number, out: Fifo, err: Fifo): Deno.ChildProcess {
  return new Deno.Command("sh", {
    args: ["-c", 'exec "$@" >"$OUT" 2>"$ERR"', "sh", ...runtime.command(port)],
    env: {
      OUT: out.path,
      ERR: err.path,
      PORT: String(port),
      HOSTNAME: "127.0.0.1",
      PUBLIC_BASE_URL: "http://127.0.0.1",
      RATE_LIMIT: "100000",
      ACCESS_LOG: "true",
      NO_COLOR: "1",
    },
    cwd: ROOT,
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
}

/** Runs `check` with a service on stuck pipes; the service is killed and the FIFOs closed after. */
async function withStuckService(
  runtime: Runtime,
  check: (
    service: { child: Deno.ChildProcess; port: number; out: Fifo; err: Fifo },
  ) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir();
  const out = await fifo(dir, "stdout");
  const err = await fifo(dir, "stderr");
  let child: Deno.ChildProcess | undefined;
  try {
    await err.file.write(
      new TextEncoder().encode(`${"x".repeat(1023)}\n`.repeat(PIPE_CAPACITY / 1024)),
    );
    const port = freePort();
    child = spawnWith(runtime, port, out, err);
    await accepting(port, 20_000);
    await check({ child, port, out, err });
  } finally {
    try {
      child?.kill("SIGKILL");
    } catch { /* already gone */ }
    await child?.status;
    out.file.close();
    err.file.close();
    await Deno.remove(dir, { recursive: true });
  }
}

async function keepsAnswering(runtime: Runtime): Promise<void> {
  await withStuckService(runtime, async ({ child, port, out, err }) => {
    const started = Date.now();
    const answered = await load(port, REQUESTS, CONNECTIONS, ANSWERED_WITHIN_MS);
    assert.equal(
      answered,
      REQUESTS,
      `answered within ${ANSWERED_WITHIN_MS} ms (${Date.now() - started} ms)`,
    );
    // Read both pipes again: each stream's count is said once it takes lines (on stderr).
    const [stdoutReader, stderrReader] = [readFifo(out), readFifo(err)];
    const stderr = await stderrReader.until(
      (text) => droppedNotes(text, "stdout").length > 0,
      15_000,
    );
    const stdout = await stdoutReader.until(() => true, 0);
    const [stdoutNote] = droppedNotes(stderr, "stdout");
    assert.ok(stdoutNote, `stdout's dropped lines said: ${stderr.slice(-2000)}`);
    assert.equal(stdoutNote.level, "warn");
    // stderr was full before the service started: its events waited, queued, and came now.
    assert.ok(jsonLines(stderr).some((e) => e.message === "listening"), "the listening event");
    // Every request is either in the access log or counted: the pipe and the queue held some of
    // the lines, the rest were dropped.
    const logged = jsonLines(stdout).filter((line) => line.path === "/api/v1/platform").length;
    const dropped = Number(stdoutNote.dropped);
    assert.ok(dropped > 0 && logged + dropped <= REQUESTS, `${logged} logged, ${dropped} dropped`);
    child.kill("SIGTERM");
    assert.equal((await child.status).code, 0);
    await Promise.all([stdoutReader.stop(), stderrReader.stop()]);
  });
}

/** Requests before the stop: their access log is more than the pipe holds (about 520 lines). */
const STOP_REQUESTS = 2_000;

/** The stop's deadline (4 s) and a margin for a busy machine. */
const STOPPED_WITHIN_MS = 8_000;

async function stopsWhileStuck(runtime: Runtime): Promise<void> {
  await withStuckService(runtime, async ({ child, port, err }) => {
    // More access log than the pipe holds: stdout is stuck when the stop comes.
    assert.equal(
      await load(port, STOP_REQUESTS, CONNECTIONS, ANSWERED_WITHIN_MS),
      STOP_REQUESTS,
      "answered",
    );
    // stderr is read from now on; stdout never is.
    const stderrReader = readFifo(err);
    const reading = stderrReader.until(
      (text) =>
        /"message":"stopped"/.test(text) &&
        droppedNotes(text, "stdout").some((n) => /at stop/.test(String(n.message))),
      STOPPED_WITHIN_MS + 2_000,
    );
    const signalled = Date.now();
    child.kill("SIGTERM");
    const status = await Promise.race([
      child.status,
      new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), STOPPED_WITHIN_MS)),
    ]);
    assert.ok(status, `stopped within ${STOPPED_WITHIN_MS} ms with stdout stuck`);
    assert.equal(status.code, 0);
    const stderr = await reading;
    const atStop = droppedNotes(stderr, "stdout").filter((n) => /at stop/.test(String(n.message)));
    assert.equal(
      atStop.length,
      1,
      `the stop said what stdout could not take: ${stderr.slice(-2000)}`,
    );
    assert.ok(Date.now() - signalled < STOPPED_WITHIN_MS);
    await stderrReader.stop();
  });
}

Deno.test("Deno: with stdout and stderr pipes nobody reads, 12,000 requests are answered, and the dropped lines are said once the pipes are read", async () => {
  await keepsAnswering(DENO);
});

Deno.test("Deno: a stop with stdout still stuck ends within the deadline and says what stdout could not take", async () => {
  await stopsWhileStuck(DENO);
});

Deno.test("Node 24: with stdout and stderr pipes nobody reads, 12,000 requests are answered, and the dropped lines are said once the pipes are read", async () => {
  await keepsAnswering(await nodeRuntime());
});

Deno.test("Node 24: a stop with stdout still stuck ends within the deadline and says what stdout could not take", async () => {
  await stopsWhileStuck(await nodeRuntime());
});
