/**
 * Test helpers for HTTP behaviour: a real server on an ephemeral loopback port, a manual clock, and a
 * raw HTTP/1.1 client.
 *
 * The server is built the way `main.ts` builds it (configuration from an env record, content from
 * `static/`, a `MemoryStore`, `createHandler`), but with an injectable clock and an in-memory access log,
 * so tests control time and can read what would have been logged.
 *
 * The raw client exists because `fetch` cannot be told to leave a request alone: Deno's `fetch` always
 * sends `Accept` and `Accept-Encoding`, decodes gzip and br bodies itself, and overrides `Host`. Tests of
 * negotiation, compression and `Host` handling need the exact bytes on the wire.
 *
 * @module
 */

import type { AccessRecord } from "../lib/access_log.ts";
import { createHandler } from "../lib/handler.ts";
import { type Config, loadConfig } from "../lib/config/config.ts";
import { type EnvName, recordEnv } from "../lib/config/env.ts";
import { type Content, loadContent } from "../lib/pages/content.ts";
import { MemoryStore } from "../lib/limit/memory/memory_store.ts";
import type { PathAnswers } from "../lib/respond/answers.ts";
import { buildAnswers } from "../lib/respond/paths.ts";
import { policyOf, type RateLimitStore } from "../lib/limit/core/decision.ts";
import { DISK_STATIC_FILES } from "../lib/server/static_files.ts";
import { NODE_STATIC_FILES } from "../lib/node/files.ts";
import type { StaticFiles } from "../lib/pages/content.ts";

/** The five rate-limit fields every response carries. */
export const RATE_LIMIT_FIELDS: readonly string[] = [
  "ratelimit-policy",
  "ratelimit",
  "ratelimit-limit",
  "ratelimit-remaining",
  "ratelimit-reset",
];

/**
 * The fields DESIGN.md requires CORS to expose (`Access-Control-Expose-Headers`), which the API
 * reference must also document: every rate-limit field, `Retry-After`, `Link`, `Deprecation`, `Sunset`,
 * and what agents read beside a Markdown body: `Content-Signal` and `x-markdown-tokens`.
 */
export const EXPOSED_FIELDS: readonly string[] = [
  "RateLimit",
  "RateLimit-Policy",
  "RateLimit-Limit",
  "RateLimit-Remaining",
  "RateLimit-Reset",
  "Retry-After",
  "Link",
  "Deprecation",
  "Sunset",
  "Content-Signal",
  "x-markdown-tokens",
];

/** The public base URL tests configure by default: deliberately not the server's own address. */
export const TEST_BASE_URL = "https://discovery.example.test";

/** A clock that moves only when told to. */
export interface ManualClock {
  /** The current time in ms since the epoch. */
  now: () => number;
  /** Moves the clock forward by `ms`. */
  advance: (ms: number) => void;
  /** Sets the clock to `ms`. */
  set: (ms: number) => void;
}

/** Creates a {@linkcode ManualClock} starting at `start` (default 2026-01-01T00:00:00Z). */
export function manualClock(start = Date.UTC(2026, 0, 1)): ManualClock {
  let time = start;
  return {
    now: () => time,
    advance: (ms) => {
      time += ms;
    },
    set: (ms) => {
      time = ms;
    },
  };
}

/** Environment overrides, by variable name. */
export type EnvRecord = Partial<Record<EnvName, string>>;

/** Builds a validated configuration from `env` (with {@linkcode TEST_BASE_URL} unless overridden). */
export function testConfig(env: EnvRecord = {}): Config {
  const result = loadConfig(recordEnv({ PUBLIC_BASE_URL: TEST_BASE_URL, ...env }));
  if (!result.ok) throw new Error(`test configuration is invalid:\n${result.errors.join("\n")}`);
  return result.config;
}

/**
 * The static files as the runtime running the tests reads them: Deno's reader, or Node's entry's
 * when the tests run on Node (`npm test`: tests/node/_deno_test_on_node.ts gives them `Deno.test`
 * alone).
 */
const STATIC_FILES: StaticFiles = "readTextFileSync" in Deno
  ? DISK_STATIC_FILES
  : NODE_STATIC_FILES;

/** Loads the content of `static/` for `config`, throwing on any problem. */
export function testContent(config: Config): Content {
  const result = loadContent(config, STATIC_FILES);
  if (!result.ok) throw new Error(`static content is invalid:\n${result.errors.join("\n")}`);
  return result.content;
}

/** Options of {@linkcode startServer}. */
export interface ServerOptions {
  /** Environment overrides (RATE_LIMIT, PUBLIC_BASE_URL, DEPRECATION_DATE...). */
  env?: EnvRecord;
  /** The handler's clock; a {@linkcode manualClock} by default. */
  clock?: ManualClock;
  /** Replaces the `MemoryStore` (e.g. a store that fails). */
  store?: RateLimitStore;
}

/** A running test server. Dispose of it (`await using`) or call `close()`. */
export interface TestServer extends AsyncDisposable {
  /** `http://127.0.0.1:<port>`, without a trailing slash. */
  url: string;
  /** The port the server listens on. */
  port: number;
  /** The configuration the server runs with. */
  config: Config;
  /** The handler's clock. */
  clock: ManualClock;
  /** The limiter's store. */
  store: RateLimitStore;
  /** Access-log records, in order. */
  records: AccessRecord[];
  /** Errors the handler answered 500, in order. */
  errors: unknown[];
  /** Stops the server and releases the store. */
  close: () => Promise<void>;
}

/**
 * Starts the service on 127.0.0.1 and an ephemeral port.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * await using server = await startServer({ env: { RATE_LIMIT: "3" } });
 * const response = await rawRequest(server.url, "/api/v1/platform");
 * assert.equal(response.status, 200);
 * ```
 */
export function startServer(options: ServerOptions = {}): Promise<TestServer> {
  const config = testConfig(options.env);
  const content = testContent(config);
  const clock = options.clock ?? manualClock();
  const store = options.store ?? new MemoryStore(
    policyOf(config),
    { maxCallers: config.rateLimitMaxCallers, now: clock.now, sweep: false },
  );
  const records: AccessRecord[] = [];
  const errors: unknown[] = [];
  const handler = createHandler({
    config,
    content,
    store,
    now: clock.now,
    accessLog: (record) => records.push(record),
    onError: (error) => errors.push(error),
    // As main.ts: the requests come from a listener of the service's own.
    requireHost: true,
  });
  const server = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, handler);
  const port = server.addr.port;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await server.shutdown();
    await store.close();
  };
  return Promise.resolve({
    url: `http://127.0.0.1:${port}`,
    port,
    config,
    clock,
    store,
    records,
    errors,
    close,
    [Symbol.asyncDispose]: close,
  });
}

/** A response read to the end by {@linkcode rawRequest}. */
export interface RawResponse {
  /** Status code. */
  status: number;
  /** Response header fields. */
  headers: Headers;
  /** The body bytes exactly as sent (still encoded when `Content-Encoding` is set). */
  body: Uint8Array;
}

/** Options of {@linkcode rawRequest}. */
export interface RawRequestOptions {
  /** Request method (default GET). */
  method?: string;
  /** Header fields, sent exactly as given; `Host` defaults to the server's address. */
  headers?: Record<string, string>;
}

const ENCODER = new TextEncoder();
const DECODER = new TextDecoder();

/**
 * Sends one HTTP/1.1 request over a fresh TCP connection and reads the whole response.
 *
 * Only the given header fields are sent (plus `Host` unless given, and `Connection: close`), and the
 * body is returned undecoded.
 *
 * @param url the server's origin, `http://127.0.0.1:<port>`
 * @param target the request target, sent as is (`/api/v1/platform?x=1`)
 */
export async function rawRequest(
  url: string,
  target: string,
  options: RawRequestOptions = {},
): Promise<RawResponse> {
  const { hostname, port, host } = new URL(url);
  const method = options.method ?? "GET";
  const fields = { ...options.headers };
  const names = Object.keys(fields).map((name) => name.toLowerCase());
  let head = `${method} ${target} HTTP/1.1\r\n`;
  if (!names.includes("host")) head += `Host: ${host}\r\n`;
  for (const [name, value] of Object.entries(fields)) head += `${name}: ${value}\r\n`;
  head += "Connection: close\r\n\r\n";

  const conn = await Deno.connect({ hostname, port: Number(port) });
  const chunks: Uint8Array[] = [];
  try {
    let written = 0;
    const bytes = ENCODER.encode(head);
    while (written < bytes.length) written += await conn.write(bytes.subarray(written));
    const buffer = new Uint8Array(65_536);
    for (;;) {
      const n = await conn.read(buffer);
      if (n === null) break;
      chunks.push(buffer.slice(0, n));
      // A server that keeps the connection open despite `Connection: close` (miniflare's, in
      // front of workerd) has still sent the whole message by now.
      if (messageComplete(concat(chunks), method)) break;
    }
  } finally {
    conn.close();
  }
  return parseResponse(concat(chunks), method);
}

function concat(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((sum, chunk) => sum + chunk.length, 0));
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.length;
  }
  return out;
}

/** Whether `bytes` hold a whole response: its head, and its body as long as it says. */
function messageComplete(bytes: Uint8Array, method: string): boolean {
  const end = indexOfCrlfCrlf(bytes);
  if (end === -1) return false;
  const head = DECODER.decode(bytes.subarray(0, end)).toLowerCase();
  const status = Number(/^http\/1\.1 (\d{3})/.exec(head)?.[1]);
  if (method === "HEAD" || status === 204 || status === 304) return true;
  const length = /\r\ncontent-length:\s*(\d+)/.exec(head)?.[1];
  if (length !== undefined) return bytes.length - end - 4 >= Number(length);
  if (/\r\ntransfer-encoding:\s*chunked/.test(head)) {
    return DECODER.decode(bytes.subarray(bytes.length - 5)) === "0\r\n\r\n";
  }
  return false;
}

function indexOfCrlfCrlf(bytes: Uint8Array): number {
  for (let i = 0; i + 3 < bytes.length; i++) {
    if (bytes[i] === 13 && bytes[i + 1] === 10 && bytes[i + 2] === 13 && bytes[i + 3] === 10) {
      return i;
    }
  }
  return -1;
}

function parseResponse(bytes: Uint8Array, method: string): RawResponse {
  const end = indexOfCrlfCrlf(bytes);
  if (end === -1) {
    throw new Error(`incomplete HTTP response: ${JSON.stringify(DECODER.decode(bytes))}`);
  }
  const [statusLine = "", ...lines] = DECODER.decode(bytes.subarray(0, end)).split("\r\n");
  const match = /^HTTP\/1\.1 (\d{3})/.exec(statusLine);
  if (!match) throw new Error(`not an HTTP/1.1 status line: ${JSON.stringify(statusLine)}`);
  const status = Number(match[1]);
  const headers = new Headers();
  for (const line of lines) {
    const colon = line.indexOf(":");
    headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
  }
  let body = bytes.subarray(end + 4);
  if (method === "HEAD" || status === 204 || status === 304) {
    if (body.length > 0) throw new Error(`a ${method} ${status} response carried a body`);
  } else if (headers.get("transfer-encoding")?.toLowerCase() === "chunked") {
    body = dechunk(body);
  } else if (headers.has("content-length")) {
    const length = Number(headers.get("content-length"));
    if (body.length !== length) {
      throw new Error(`Content-Length ${length} but ${body.length} bytes were received`);
    }
  }
  return { status, headers, body: new Uint8Array(body) };
}

function dechunk(bytes: Uint8Array): Uint8Array {
  const parts: Uint8Array[] = [];
  let offset = 0;
  for (;;) {
    let lineEnd = offset;
    while (lineEnd + 1 < bytes.length && !(bytes[lineEnd] === 13 && bytes[lineEnd + 1] === 10)) {
      lineEnd++;
    }
    const size = parseInt(DECODER.decode(bytes.subarray(offset, lineEnd)).split(";")[0]!, 16);
    if (!(size >= 0)) throw new Error("malformed chunked body");
    if (size === 0) break;
    parts.push(bytes.subarray(lineEnd + 2, lineEnd + 2 + size));
    offset = lineEnd + 2 + size + 2;
  }
  return concat(parts);
}

/**
 * The paths of `config` and `content` with every representation built, as the warm-up leaves them
 * (pages load `marked` first).
 */
export async function preparedPaths(
  config: Config,
  content: Content,
): Promise<ReadonlyMap<string, PathAnswers>> {
  const paths = buildAnswers(config, content).paths;
  await Promise.all([...paths.values()].map((path) => path.prepare()));
  return paths;
}
