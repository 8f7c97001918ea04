/**
 * Node's fast path (`lib/node/fast_path.ts`: the handler's answer written with `writeHead`, no
 * `Response` built) held to Deno's bytes: the real Node entry (`lib/node/main.ts`, Node 24 and 26)
 * and the real Deno entry (`main.ts --listen`), both warmed up, are sent the same raw requests, and
 * each answer must be the same status line, the same header lines in the same order, byte for byte,
 * and the same body bytes. Only the transport's own lines are left out: `Date`, and `Connection` and
 * `Keep-Alive`, which each server writes for its connection in its own case.
 *
 * The requests: every path in every representation and coding, HEAD, OPTIONS and a CORS
 * preflight, the 304 of a conditional GET, the 404 in each media type, the 405, the 400 of a bad
 * `Host`, the 403 of a denied caller, the 429 of a caller past its limit, and the 429
 * `rate_limit_unavailable` of a store that cannot be reached. Each request comes from a caller of
 * its own (`X-Forwarded-For`), so that the rate-limit fields are the same on both. The 500 has no
 * input that causes it in a real entry: its answer goes through the same wire form, which
 * tests/respond/wire_test.ts holds to the `fetch` handler's `Response`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { decodeBody } from "../_contract.ts";
import { ensureNodeModules, NODE_LINES, nodeBinary } from "../_node.ts";
import { type ServiceProcess, startService } from "../_service_process.ts";
import { testContent } from "../_server.ts";
import { buildAnswers } from "../../lib/respond/paths.ts";
import { loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";

await ensureNodeModules();

/** The limit both run with: low, so that a caller's 429 costs four requests. */
const LIMIT = 3;
/** A caller both deny (`RATE_LIMIT_DENY`). */
const DENIED = "203.0.113.7";
const ENV = {
  PUBLIC_BASE_URL: "http://127.0.0.1",
  ACCESS_LOG: "false",
  TRUSTED_PROXIES: "127.0.0.1",
  RATE_LIMIT: String(LIMIT),
  RATE_LIMIT_DENY: DENIED,
} as const;

/** The lines of a compressed answer that name its bytes: their length, and the tag of those bytes. */
const BYTES_NAMED = new Set(["content-length", "etag"]);

/** The transport's own lines, which each server writes for its connection. */
const TRANSPORT = new Set(["date", "connection", "keep-alive"]);

/** The requests sent to every path. */
const VARIANTS: ReadonlyArray<{ method: string; headers: Record<string, string> }> = [
  { method: "GET", headers: {} },
  { method: "GET", headers: { accept: "application/json" } },
  { method: "GET", headers: { accept: "text/markdown" } },
  { method: "GET", headers: { accept: "text/html;q=0.9, text/markdown;q=0.8" } },
  { method: "GET", headers: { "accept-encoding": "br" } },
  { method: "GET", headers: { "accept-encoding": "gzip", accept: "text/markdown" } },
  { method: "GET", headers: { "accept-encoding": "gzip, br", accept: "text/html" } },
  { method: "HEAD", headers: {} },
  { method: "HEAD", headers: { accept: "text/markdown", "accept-encoding": "br" } },
  { method: "OPTIONS", headers: {} },
  {
    method: "OPTIONS",
    headers: { origin: "https://app.example.org", "access-control-request-method": "GET" },
  },
  { method: "POST", headers: {} },
  { method: "DELETE", headers: { accept: "text/markdown" } },
  { method: "GET", headers: { host: "bad host" } },
];

/** An answer as it came off the socket: its status line, its header lines in order, its body. */
interface WireAnswer {
  statusLine: string;
  lines: string[];
  body: Uint8Array;
}

const ENCODER = new TextEncoder();
const DECODER = new TextDecoder();

/** Sends `head` on a fresh connection to `url` and reads the answer until the server closes. */
async function exchange(url: string, head: string): Promise<WireAnswer> {
  const { hostname, port } = new URL(url);
  const conn = await Deno.connect({ hostname, port: Number(port) });
  const chunks: Uint8Array[] = [];
  try {
    const bytes = ENCODER.encode(head);
    let written = 0;
    while (written < bytes.length) written += await conn.write(bytes.subarray(written));
    const buffer = new Uint8Array(65_536);
    for (let n = await conn.read(buffer); n !== null; n = await conn.read(buffer)) {
      chunks.push(buffer.slice(0, n));
    }
  } finally {
    conn.close();
  }
  const all = new Uint8Array(chunks.reduce((sum, chunk) => sum + chunk.length, 0));
  let at = 0;
  for (const chunk of chunks) all.set(chunk, (at += chunk.length) - chunk.length);
  const end = DECODER.decode(all).indexOf("\r\n\r\n");
  assert.ok(end > 0, `no complete head from ${url}: ${DECODER.decode(all.slice(0, 200))}`);
  const [statusLine, ...lines] = DECODER.decode(all.subarray(0, end)).split("\r\n");
  return { statusLine: statusLine!, lines, body: all.subarray(end + 4) };
}

/** The request's head: the fields as given, `Host` unless given, and `Connection: close`. */
function headOf(method: string, target: string, url: string, fields: Record<string, string>) {
  let head = `${method} ${target} HTTP/1.1\r\n`;
  if (!("host" in fields)) head += `Host: ${new URL(url).host}\r\n`;
  for (const [name, value] of Object.entries(fields)) head += `${name}: ${value}\r\n`;
  return `${head}Connection: close\r\n\r\n`;
}

/**
 * Asserts Node's answer is Deno's: status line, every non-transport line in order, body bytes.
 *
 * One difference is not the fast path's: each runtime's compressor can give other bytes for one
 * body (issue 55 item 1: br 172 bytes on Node, 209 on Deno with each runtime's `CompressionStream`).
 * A compressed body whose bytes differ is held to Deno's decoded, every line but its
 * `content-length` and its ETag (which may name the bytes themselves) still the same; where both
 * compress alike, this branch is never taken and the bytes are compared as they are.
 */
function assertSameBytes(fromNode: WireAnswer, fromDeno: WireAnswer, what: string): void {
  const own = (answer: WireAnswer) => answer.lines.filter((line) => !TRANSPORT.has(nameOf(line)));
  assert.equal(fromNode.statusLine, fromDeno.statusLine, what);
  const coding = own(fromDeno).find((line) => nameOf(line) === "content-encoding");
  const same = own(fromNode).join("\n") === own(fromDeno).join("\n") &&
    fromNode.body.length === fromDeno.body.length &&
    fromNode.body.every((byte, i) => byte === fromDeno.body[i]);
  if (coding === undefined || same) {
    assert.deepEqual(own(fromNode), own(fromDeno), what);
    assert.deepEqual(fromNode.body, fromDeno.body, `${what}: body`);
    return;
  }
  const unsized = (answer: WireAnswer) =>
    own(answer).filter((line) => !BYTES_NAMED.has(nameOf(line)));
  assert.deepEqual(unsized(fromNode), unsized(fromDeno), `${what} (${coding})`);
  const name = coding.slice(coding.indexOf(":") + 1);
  // HEAD: no body on either side to decode.
  if (fromNode.body.length + fromDeno.body.length === 0) return;
  assert.deepEqual(
    decodeBody(fromNode.body, name),
    decodeBody(fromDeno.body, name),
    `${what}: body (${coding}, decoded)`,
  );
}

/** A header line's field name, lower-case. */
function nameOf(line: string): string {
  return line.slice(0, line.indexOf(":")).toLowerCase();
}

/** Starts a service and waits until its warm-up has built every representation and coding. */
async function warmed(service: Promise<ServiceProcess>): Promise<ServiceProcess> {
  const started = await service;
  const deadline = Date.now() + 30_000;
  while (!started.events.some((event) => /^warmed up/.test(String(event.message)))) {
    assert.ok(Date.now() < deadline, "the service did not warm up within 30 s");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return started;
}

/** The paths the service serves, as the Deno entry's configuration lists them. */
function servedPaths(): string[] {
  const loaded = loadConfig(recordEnv({ ...ENV }));
  assert.ok(loaded.ok);
  return [...buildAnswers(loaded.config, testContent(loaded.config)).paths.keys()];
}

/** A port on 127.0.0.1 that was free a moment ago: nothing answers there. */
function closedPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/**
 * Both entries on a Redis store that nothing answers, refusing what they cannot count
 * (`RATE_LIMIT_ON_STORE_ERROR=closed`): one request to each, its answer.
 */
async function unreachable(
  major: number,
  node: string,
): Promise<readonly [WireAnswer, WireAnswer]> {
  const env = {
    ...ENV,
    RATE_LIMIT_STORE: "redis",
    REDIS_URL: `redis://127.0.0.1:${closedPort()}`,
    RATE_LIMIT_ON_STORE_ERROR: "closed",
    RATE_LIMIT_STORE_TIMEOUT_MS: "200",
  };
  const [onNode, onDeno] = await Promise.all([
    startService(env, 30_000, { node }),
    startService(env, 30_000),
  ]);
  try {
    const fields = { "x-forwarded-for": `10.${major}.254.1` };
    return [
      await exchange(onNode.url, headOf("GET", "/api/v1/platform", onNode.url, fields)),
      await exchange(onDeno.url, headOf("GET", "/api/v1/platform", onDeno.url, fields)),
    ] as const;
  } finally {
    await Promise.all([onNode.stop(), onDeno.stop()]);
  }
}

for (const major of NODE_LINES) {
  Deno.test(`Node ${major}'s fast path sends Deno's bytes: every path, representation, coding, 304, 404, 405, 400, 403 and both 429s`, async (t) => {
    const node = await nodeBinary(major);
    const [onNode, onDeno] = await Promise.all([
      warmed(startService({ ...ENV }, 30_000, { node })),
      warmed(startService({ ...ENV }, 30_000)),
    ]);
    let caller = 0;
    /** One request to both from `from` (a caller of its own unless given). */
    const both = async (
      method: string,
      target: string,
      fields: Record<string, string>,
      from = `10.${major}.${caller >> 8}.${caller++ & 255}`,
    ) => {
      const withCaller = { ...fields, "x-forwarded-for": from };
      return [
        await exchange(onNode.url, headOf(method, target, onNode.url, withCaller)),
        await exchange(onDeno.url, headOf(method, target, onDeno.url, withCaller)),
      ] as const;
    };
    try {
      await t.step("every path in every variant, and an unknown one", async () => {
        for (const target of [...servedPaths(), "/no/such/path"]) {
          for (const { method, headers } of VARIANTS) {
            const [fromNode, fromDeno] = await both(method, target, headers);
            assertSameBytes(fromNode, fromDeno, `${method} ${target} ${JSON.stringify(headers)}`);
          }
        }
      });
      await t.step("a conditional GET's 304, on every path", async () => {
        for (const target of servedPaths()) {
          const [first] = await both("GET", target, {});
          const etag = first.lines.find((line) => line.startsWith("etag: "))!.slice(6);
          const [fromNode, fromDeno] = await both("GET", target, { "if-none-match": etag });
          assert.equal(fromNode.statusLine, "HTTP/1.1 304 Not Modified", target);
          assertSameBytes(fromNode, fromDeno, `304 of ${target}`);
        }
      });
      await t.step(
        "a store that cannot be reached gets the same 429 rate_limit_unavailable",
        async () => {
          const [fromNode, fromDeno] = await unreachable(major, node);
          assert.equal(fromNode.statusLine, "HTTP/1.1 429 Too Many Requests");
          assert.match(new TextDecoder().decode(fromNode.body), /"rate_limit_unavailable"/);
          assertSameBytes(fromNode, fromDeno, "429 rate_limit_unavailable");
        },
      );
      await t.step(
        "a caller past its limit gets the same 429, and a denied one the same 403",
        async () => {
          const spender = `10.${major}.255.1`;
          for (let sent = 0; sent < LIMIT; sent++) {
            await both("GET", "/api/v1/platform", {}, spender);
          }
          const [fromNode, fromDeno] = await both("GET", "/api/v1/platform", {}, spender);
          assert.equal(fromNode.statusLine, "HTTP/1.1 429 Too Many Requests");
          assertSameBytes(fromNode, fromDeno, "429");
          const [denied, deniedOnDeno] = await both("GET", "/llms.txt", {}, DENIED);
          assert.equal(denied.statusLine, "HTTP/1.1 403 Forbidden");
          assertSameBytes(denied, deniedOnDeno, "403");
        },
      );
    } finally {
      await Promise.all([onNode.stop(), onDeno.stop()]);
    }
  });
}
