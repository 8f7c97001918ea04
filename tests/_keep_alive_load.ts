/**
 * A well-behaved HTTP/1.1 client on raw keep-alive connections, for shutdown and flood tests: one
 * request at a time per connection, each response read whole, and a connection given up once the
 * server says `Connection: close` (a server that is stopping; the client goes elsewhere).
 *
 * Unlike `fetch`, it never retries on its own, so every request it wrote either got its response or
 * is counted as lost. A connection refused before any byte was written is not a loss: nothing was
 * sent, and a client may safely retry it.
 *
 * @module
 */

import { createConnection } from "node:net";

const ENCODER = new TextEncoder();
const DECODER = new TextDecoder();

/** What the load needs of a connection: `Deno.Conn`'s read, write and close. */
export type LoadConn = Pick<Deno.Conn, "read" | "write" | "close">;

/** One response's status and whether it told the client to close. */
export interface Exchanged {
  /** HTTP status. */
  status: number;
  /** Whether it carried `Connection: close`. */
  close: boolean;
}

/**
 * Writes one raw request head on an open connection and reads its whole response (GET: the body has
 * a `Content-Length`). Undefined when the connection closed without a byte of answer; throws when it
 * closed in the middle of one.
 */
export async function exchange(
  conn: Pick<LoadConn, "read" | "write">,
  head: string,
): Promise<Exchanged | undefined> {
  try {
    await conn.write(ENCODER.encode(head));
  } catch {
    return undefined;
  }
  let received = new Uint8Array(0);
  const chunk = new Uint8Array(16_384);
  while (true) {
    const text = DECODER.decode(received);
    const end = text.indexOf("\r\n\r\n");
    if (end >= 0) {
      const fields = text.slice(0, end);
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(fields)?.[1] ?? NaN);
      if (!Number.isInteger(length)) throw new Error(`no content-length in ${fields}`);
      if (received.length >= end + 4 + length) {
        return {
          status: Number(fields.split(" ")[1]),
          close: /\r\nconnection: *close/i.test(fields),
        };
      }
    }
    let read: number | null;
    try {
      read = await conn.read(chunk);
    } catch {
      read = null;
    }
    if (read === null) {
      if (received.length === 0) return undefined;
      throw new Error(`connection closed in the middle of a response: ${DECODER.decode(received)}`);
    }
    const next = new Uint8Array(received.length + read);
    next.set(received);
    next.set(chunk.subarray(0, read), received.length);
    received = next;
  }
}

/** The raw head of `GET path` to 127.0.0.1, with extra header lines. */
export function getHead(path: string, ...fields: string[]): string {
  return `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${fields.map((f) => `${f}\r\n`).join("")}\r\n`;
}

/**
 * A connection to 127.0.0.1:`port` from the local address `from` (any of 127.0.0.0/8 is loopback):
 * a client of its own address, as nginx and the service see it. `Deno.connect` cannot choose its
 * local address; node:net can.
 */
export function connectFrom(port: number, from: string): Promise<LoadConn> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: "127.0.0.1", port, localAddress: from });
    const chunks: Uint8Array[] = [];
    let ended = false;
    let wake: (() => void) | undefined;
    const woken = () => {
      wake?.();
      wake = undefined;
    };
    socket.on("data", (chunk: Uint8Array) => {
      chunks.push(chunk);
      woken();
    });
    for (const event of ["end", "close", "error"]) {
      socket.on(event, () => {
        ended = true;
        woken();
      });
    }
    socket.once("error", reject);
    socket.once("connect", () => {
      socket.off("error", reject);
      resolve({
        async read(buffer) {
          while (chunks.length === 0 && !ended) await new Promise<void>((done) => wake = done);
          const chunk = chunks.shift();
          if (chunk === undefined) return null;
          const read = Math.min(chunk.length, buffer.length);
          buffer.set(chunk.subarray(0, read));
          if (read < chunk.length) chunks.unshift(chunk.subarray(read));
          return read;
        },
        write: (bytes) =>
          new Promise((written, failed) =>
            socket.write(bytes, (error) => error ? failed(error) : written(bytes.length))
          ),
        close: () => socket.destroy(),
      });
    });
  });
}

/** One request of a {@linkcode keepAliveLoad}, once it is over. */
export interface LoadRequest {
  /** The worker (connection) that sent it, from 0. */
  worker: number;
  /** When it was written, in ms since the epoch (`performance.timeOrigin + performance.now()`). */
  startedAt: number;
  /** How long until its response was read whole, or its connection ended, in ms. */
  ms: number;
  /** Its status; undefined when its connection ended without an answer (lost). */
  status: number | undefined;
}

/** What happened to the requests of a {@linkcode keepAliveLoad}. */
export interface LoadOutcome {
  /** Requests answered with a complete response, by status. */
  answered: Map<number, number>;
  /** Requests written whose connection ended before their response: lost. */
  lost: number;
  /** Connections refused (nothing written). */
  refused: number;
  /** Responses that carried `Connection: close`. */
  toldToClose: number;
}

/** Options of {@linkcode keepAliveLoad}. */
export interface LoadOptions {
  /** Port on 127.0.0.1. */
  port: number;
  /** Concurrent connections. */
  connections: number;
  /** The load stops when this resolves (each connection finishes its request in flight). */
  until: Promise<unknown>;
  /** The raw request head of the nth request. */
  request: (n: number) => string;
  /**
   * Whether a worker told to close opens a new connection and goes on (a client that honours
   * `Connection: close` and keeps its traffic); by default it stops.
   */
  reconnect?: boolean;
  /** Called after each complete response: for a test that waits for the load to be under way. */
  onAnswered?: () => void;
  /** Called as each request is over, answered or lost: for a test that times them. */
  onRequest?: (request: LoadRequest) => void;
  /** Opens worker `n`'s connections; by default `Deno.connect` to 127.0.0.1:`port`. */
  connect?: (worker: number) => Promise<LoadConn>;
  /**
   * A pause between a worker's answer and its next request, in ms (0 by default: as fast as the
   * server answers): a load that leaves the machine's other work some CPU.
   */
  pauseMs?: number;
}

/**
 * Runs the load and reports every request's fate. A worker whose connection is refused tries again;
 * one told to close stops by default: a connection opened while the server is stopping could still
 * meet the final close before its request is read, which HTTP/1.1 leaves to the client to retry
 * (RFC 9112 section 9.3.1). With `reconnect` it opens a new connection instead, and such a request
 * counts as lost: the rolling restart behind nginx, and the issue's measurement, count it.
 */
export async function keepAliveLoad(options: LoadOptions): Promise<LoadOutcome> {
  const outcome: LoadOutcome = { answered: new Map(), lost: 0, refused: 0, toldToClose: 0 };
  let stopped = false;
  options.until.then(() => stopped = true);
  let sent = 0;
  const connect = options.connect ??
    (() => Deno.connect({ hostname: "127.0.0.1", port: options.port }));
  const now = () => performance.timeOrigin + performance.now();
  const worker = async (index: number) => {
    while (!stopped) {
      let conn: LoadConn;
      try {
        conn = await connect(index);
      } catch {
        outcome.refused++;
        await new Promise((resolve) => setTimeout(resolve, 10));
        continue;
      }
      try {
        while (!stopped) {
          const startedAt = now();
          const response = await exchange(conn, options.request(sent++)).catch(() => undefined);
          const ms = now() - startedAt;
          options.onRequest?.({ worker: index, startedAt, ms, status: response?.status });
          if (response === undefined) {
            outcome.lost++;
            break;
          }
          outcome.answered.set(response.status, (outcome.answered.get(response.status) ?? 0) + 1);
          options.onAnswered?.();
          if (response.close) {
            outcome.toldToClose++;
            if (options.reconnect) break;
            return;
          }
          if (options.pauseMs) await new Promise((resolve) => setTimeout(resolve, options.pauseMs));
        }
      } finally {
        try {
          conn.close();
        } catch { /* closed by the peer */ }
      }
    }
  };
  await Promise.all(Array.from({ length: options.connections }, (_, index) => worker(index)));
  return outcome;
}

/** How long {@linkcode AnswerCounter.after} waits for its answers before it fails. */
const ANSWERS_WAIT_MS = 30_000;

/**
 * Counts a load's answers (pass `onAnswered` to {@linkcode keepAliveLoad}) and lets a test wait for
 * more of them: that the load ran through a step, an event rather than a pause.
 */
export class AnswerCounter {
  #answers = 0;
  #waiting: { count: number; resolve: () => void }[] = [];

  /** For {@linkcode LoadOptions.onAnswered}. */
  readonly onAnswered = (): void => {
    this.#answers++;
    this.#waiting = this.#waiting.filter(({ count, resolve }) => {
      if (this.#answers < count) return true;
      resolve();
      return false;
    });
  };

  /** Resolves once `more` answers have come after this call; rejects after 30 s without them. */
  async after(more: number): Promise<void> {
    const count = this.#answers + more;
    const { promise, resolve } = Promise.withResolvers<void>();
    this.#waiting.push({ count, resolve });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new Error(`the load answered ${more - (count - this.#answers)} of ${more} in 30 s`),
          ),
        ANSWERS_WAIT_MS,
      );
    });
    try {
      await Promise.race([promise, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}
