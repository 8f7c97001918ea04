/**
 * A raw HTTP/1.x client over `node:net`, for the tests that hold the bytes a server writes, whatever
 * they are, on Deno and on Node (`npm test` runs on Node with `node:` modules only): the request is
 * sent exactly as given, and the answers are read as they come, their status line's version, status,
 * fields and body, interim 1xx answers included, until as many final answers as asked have come,
 * the server closes, or the time is up.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { connect, type Socket } from "node:net";

/** One answer as written on the wire. */
export interface RawAnswer {
  /** The status line's version: `1.0` or `1.1`. */
  version: string;
  /** The status code. */
  status: number;
  /** The fields, names in lower case, repeated ones joined with ", ". */
  fields: Map<string, string>;
  /** The body, as sent. */
  body: Uint8Array;
}

/** What {@linkcode exchange} read. */
export interface Exchange {
  /** The answers, interim ones included, in order. */
  answers: RawAnswer[];
  /** Whether the server closed the connection before the time was up. */
  closed: boolean;
  /** The milliseconds from sending to the end of reading. */
  ms: number;
}

/** Options of {@linkcode exchange}. */
export interface ExchangeOptions {
  /** Final (non-1xx) answers to wait for; 0 waits for the close or the time. Default 1. */
  finals?: number;
  /** The longest the exchange may take, in ms. Default 5000. */
  timeoutMs?: number;
  /** Whether each request was HEAD, so that its answer has no body. */
  head?: boolean;
}

/** Sends `request` to `127.0.0.1:port` on a fresh connection and reads the answers. */
export function exchange(
  port: number,
  request: string | Uint8Array,
  options: ExchangeOptions = {},
): Promise<Exchange> {
  const finals = options.finals ?? 1;
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port });
    let bytes = new Uint8Array(0);
    let settled = false;
    const done = (closed: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      try {
        resolve({
          answers: parseAnswers(bytes, options.head ?? false),
          closed,
          ms: Date.now() - started,
        });
      } catch (error) {
        reject(error);
      }
    };
    const timer = setTimeout(() => done(false), options.timeoutMs ?? 5000);
    socket.on("data", (chunk: Uint8Array) => {
      const joined = new Uint8Array(bytes.length + chunk.length);
      joined.set(bytes);
      joined.set(chunk, bytes.length);
      bytes = joined;
      if (finals > 0 && finalCount(bytes, options.head ?? false) >= finals) done(false);
    });
    socket.on("end", () => done(true));
    socket.on("close", () => done(true));
    socket.on("error", () => done(true));
    socket.write(typeof request === "string" ? Buffer.from(request, "latin1") : request);
  });
}

const LATIN1 = new TextDecoder("latin1");

/** The number of whole final answers in `bytes`. */
function finalCount(bytes: Uint8Array, head: boolean): number {
  let count = 0;
  for (const answer of readAnswers(bytes, head).answers) if (answer.status >= 200) count++;
  return count;
}

/** Every whole answer in `bytes`; a partial one at the end is an error. */
function parseAnswers(bytes: Uint8Array, head: boolean): RawAnswer[] {
  const { answers, rest } = readAnswers(bytes, head);
  if (rest > 0) {
    throw new Error(`a partial answer: ${JSON.stringify(LATIN1.decode(bytes.subarray(-rest)))}`);
  }
  return answers;
}

/** The whole answers at the start of `bytes`, and how many bytes are left after them. */
function readAnswers(bytes: Uint8Array, head: boolean): { answers: RawAnswer[]; rest: number } {
  const text = LATIN1.decode(bytes);
  const answers: RawAnswer[] = [];
  let at = 0;
  while (at < text.length) {
    const end = text.indexOf("\r\n\r\n", at);
    if (end === -1) break;
    const [statusLine = "", ...lines] = text.slice(at, end).split("\r\n");
    const match = /^HTTP\/(1\.[01]) (\d{3})/.exec(statusLine);
    if (match === null) throw new Error(`not a status line: ${JSON.stringify(statusLine)}`);
    const fields = new Map<string, string>();
    for (const line of lines) {
      const colon = line.indexOf(":");
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      fields.set(name, fields.has(name) ? `${fields.get(name)}, ${value}` : value);
    }
    const status = Number(match[2]);
    const bodyless = head || status < 200 || status === 204 || status === 304;
    const length = bodyless ? 0 : Number(fields.get("content-length") ?? 0);
    if (end + 4 + length > bytes.length) break;
    answers.push({
      version: match[1]!,
      status,
      fields,
      body: bytes.slice(end + 4, end + 4 + length),
    });
    at = end + 4 + length;
  }
  return { answers, rest: bytes.length - at };
}

/**
 * What kind of body an answer has: `empty`, `error:<code>` for the service's Error, or its media
 * type without parameters.
 */
export function bodyKind(answer: RawAnswer): string {
  if (answer.body.length === 0) return "empty";
  const type = (answer.fields.get("content-type") ?? "").split(";")[0]!.trim();
  if (type === "application/json") {
    try {
      const code = JSON.parse(new TextDecoder().decode(answer.body))?.error?.code;
      if (typeof code === "string") return `error:${code}`;
    } catch {
      // Not JSON: its type says what it is.
    }
  }
  return type;
}

/**
 * Sends `request` to `127.0.0.1:port` on a connection whose client keeps its side open after the
 * server has answered and closed its own (`allowHalfOpen`), or closes it then if `close`; resolves
 * with the socket once the server has ended its side.
 */
export function answeredHalfOpen(
  port: number,
  request: string,
  options: { close?: boolean } = {},
): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port, allowHalfOpen: options.close !== true });
    socket.on("error", reject);
    socket.on("data", () => {});
    socket.on("end", () => resolve(socket));
    socket.write(Buffer.from(request, "latin1"));
  });
}

/**
 * Requests Node's HTTP server does not answer itself (its entry writes their answers on the socket):
 * an unknown method, a head that is not one, two `Content-Length` values, a CONNECT, and an unknown
 * method pipelined after a GET.
 */
export const RAW_ANSWERED: readonly string[] = [
  "FOO /b HTTP/1.1\r\nHost: localhost\r\n\r\n",
  "HELLO\r\n\r\n",
  "GET /a HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nContent-Length: 1\r\n\r\n",
  "CONNECT localhost:1 HTTP/1.1\r\nHost: localhost:1\r\n\r\n",
  "GET /a HTTP/1.1\r\nHost: localhost\r\n\r\nFOO /b HTTP/1.1\r\nHost: localhost\r\n\r\n",
];
