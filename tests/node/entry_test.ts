/**
 * Node's entry as `npm start` runs it (`node lib/node/main.ts`), over a real loopback port, from the
 * Node that runs the tests: `npm test` runs this file (tests/node/node_files.json) with `node:`
 * modules only, and the Deno suite runs `npm test` on Node 24 and 26 (tests/node/node_test.ts).
 *
 * - every path answers 200 with the bytes and type the handler builds, and the five RateLimit fields;
 * - negotiation: Markdown, br and gzip, 304, HEAD, OPTIONS, 405, 404 in JSON and Markdown;
 * - the limit: its fields counting down, then 429 `rate_limited` with `Retry-After`;
 * - the decided answer to each request where Node's and Deno's differed (`_parity_cases.ts`);
 * - a parser's refusal logged, a late head answered 408, a silent connection closed;
 * - a SIGTERM stop that clients of answered refusals, keeping their side open, do not hold up.
 *
 * Under `deno test` these are ignored: they need the Node that runs them (`process.execPath`).
 *
 * @module
 */

import assert from "node:assert/strict";
import { connect } from "node:net";
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { buildAnswers } from "../../lib/respond/paths.ts";
import { HEADERS_TIMEOUT_MS } from "../../lib/node/serve.ts";
import { TEST_BASE_URL, testConfig, testContent } from "../_server.ts";
import { startNodeEntry } from "./_node_entry.ts";
import { answeredHalfOpen, bodyKind, exchange, RAW_ANSWERED, type RawAnswer } from "./_raw_http.ts";
import { PARITY_CASES } from "./_parity_cases.ts";

/** Why these tests do not run under Deno, or undefined on Node (the harness's `Deno` has no version). */
const notOnNode = "version" in Deno
  ? "run on Node by npm test, which tests/node/node_test.ts runs on Node 24 and 26"
  : undefined;

/** A test of Node's entry, ignored under Deno with the reason in its name. */
function entryTest(name: string, fn: () => Promise<void>): void {
  Deno.test({
    name: notOnNode === undefined ? name : `${name} (ignored: ${notOnNode})`,
    ignore: notOnNode !== undefined,
    fn,
  });
}

/** The configuration of the entry and of the in-process handler it is compared with. */
const ENV = { PUBLIC_BASE_URL: TEST_BASE_URL, TRUSTED_PROXIES: "127.0.0.1" };

/** `method target` from caller `client`, with `fields`, on a fresh connection: its one answer. */
async function call(
  port: number,
  target: string,
  options: { method?: string; client: string; fields?: Record<string, string> },
): Promise<RawAnswer> {
  const method = options.method ?? "GET";
  const fields = { host: "localhost", "x-forwarded-for": options.client, ...options.fields };
  const head = `${method} ${target} HTTP/1.1\r\n${
    Object.entries(fields).map(([name, value]) => `${name}: ${value}\r\n`).join("")
  }\r\n`;
  const { answers } = await exchange(port, head, { head: method === "HEAD" });
  assert.equal(answers.length, 1, `${method} ${target}: ${answers.length} answers`);
  return answers[0]!;
}

/** Sends part of a head, then resets the connection (a TCP RST). */
function resetMidHead(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port }, () => {
      socket.write("GET /api/v1/pla", () =>
        setTimeout(() => {
          socket.resetAndDestroy();
          resolve();
        }, 100));
    });
    socket.on("error", reject);
  });
}

/** The five RateLimit fields, present, for a limit of `limit` and `remaining` left. */
function assertRateLimit(answer: RawAnswer, limit: number, remaining: number, what: string): void {
  assert.equal(answer.fields.get("ratelimit-policy"), `"default";q=${limit};w=60`, what);
  assert.equal(answer.fields.get("ratelimit-limit"), String(limit), what);
  assert.equal(answer.fields.get("ratelimit-remaining"), String(remaining), what);
  assert.match(
    answer.fields.get("ratelimit") ?? "",
    new RegExp(`^"default";r=${remaining};t=\\d+$`),
  );
  assert.match(answer.fields.get("ratelimit-reset") ?? "", /^\d+$/, what);
}

entryTest(
  "Node's entry answers every path 200 with the handler's bytes and type, and the RateLimit fields",
  async () => {
    const env = { ...ENV, RATE_LIMIT: "1000" };
    const entry = await startNodeEntry(env);
    try {
      const config = testConfig(env);
      const paths = buildAnswers(config, testContent(config)).paths;
      let sent = 0;
      for (const [target, path] of paths) {
        const answer = await call(entry.port, target, { client: "198.51.100.1" });
        const built = await path.variant(null, null);
        const what = `GET ${target}`;
        assert.equal(`HTTP/${answer.version} ${answer.status}`, "HTTP/1.1 200", what);
        const body = built.get.body;
        assert.deepEqual(
          answer.body,
          typeof body === "string" ? new TextEncoder().encode(body) : new Uint8Array(body ?? []),
          what,
        );
        assert.equal(answer.fields.get("etag"), built.etag, what);
        assert.equal(
          answer.fields.get("content-type"),
          new Map(built.get.fields).get("content-type"),
          what,
        );
        assertRateLimit(answer, 1000, 1000 - ++sent, what);
      }
      assert.ok(sent >= 15, `${sent} paths`);
    } finally {
      assert.equal(await entry.stop(), 0);
    }
  },
);

entryTest(
  "Node's entry negotiates: Markdown, br and gzip, 304, HEAD, OPTIONS, 405 and 404",
  async () => {
    const entry = await startNodeEntry({ ...ENV, RATE_LIMIT: "1000" });
    try {
      const at = (target: string, method = "GET", fields: Record<string, string> = {}) =>
        call(entry.port, target, { method, client: "198.51.100.2", fields });
      const json = await at("/api/v1/platform");
      const markdown = await at("/api/v1/platform", "GET", { accept: "text/markdown" });
      assert.equal(markdown.status, 200);
      assert.equal(markdown.fields.get("content-type"), "text/markdown; charset=utf-8");
      assert.equal(markdown.fields.get("vary"), "Accept, Accept-Encoding");
      // The codings are built by the warm-up: wait for it.
      await entry.waitForEvent((event) => /^warmed up/.test(String(event.message)), 30_000);
      const br = await at("/openapi.json", "GET", { "accept-encoding": "br" });
      const gzip = await at("/openapi.json", "GET", { "accept-encoding": "gzip" });
      const identity = await at("/openapi.json");
      assert.equal(br.fields.get("content-encoding"), "br");
      assert.equal(gzip.fields.get("content-encoding"), "gzip");
      assert.deepEqual(new Uint8Array(brotliDecompressSync(br.body)), identity.body);
      assert.deepEqual(new Uint8Array(gunzipSync(gzip.body)), identity.body);
      assert.ok(br.body.length < identity.body.length / 4, `br: ${br.body.length} bytes`);
      const etag = json.fields.get("etag")!;
      const notModified = await at("/api/v1/platform", "GET", { "if-none-match": etag });
      assert.equal(notModified.status, 304);
      assert.equal(notModified.body.length, 0);
      const head = await at("/api/v1/platform", "HEAD");
      assert.equal(head.status, 200);
      assert.equal(head.fields.get("content-length"), String(json.body.length));
      const options = await at("/api/v1/platform", "OPTIONS");
      assert.equal(options.status, 204);
      assert.equal(options.fields.get("allow"), "GET, HEAD, OPTIONS");
      const post = await at("/api/v1/platform", "POST");
      assert.equal(`${post.status} ${bodyKind(post)}`, "405 error:method_not_allowed");
      assert.equal(post.fields.get("allow"), "GET, HEAD, OPTIONS");
      const missing = await at("/api/v2/platform");
      assert.equal(`${missing.status} ${bodyKind(missing)}`, "404 error:not_found");
      const missingMarkdown = await at("/api/v2/platform", "GET", { accept: "text/markdown" });
      assert.equal(`${missingMarkdown.status} ${bodyKind(missingMarkdown)}`, "404 text/markdown");
    } finally {
      assert.equal(await entry.stop(), 0);
    }
  },
);

entryTest(
  "Node's entry counts a caller's requests in its fields and refuses the one over the limit with 429 rate_limited",
  async () => {
    const entry = await startNodeEntry({ ...ENV, RATE_LIMIT: "3" });
    try {
      const client = "198.51.100.3";
      for (let left = 2; left >= 0; left--) {
        const admitted = await call(entry.port, "/api/v1/platform", { client });
        assert.equal(admitted.status, 200);
        assertRateLimit(admitted, 3, left, `r=${left}`);
      }
      for (let i = 0; i < 2; i++) {
        const refused = await call(entry.port, "/llms.txt", { client });
        assert.equal(`${refused.status} ${bodyKind(refused)}`, "429 error:rate_limited");
        assertRateLimit(refused, 3, 0, "refused");
        const retryAfter = Number(refused.fields.get("retry-after"));
        assert.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After: ${retryAfter}`);
      }
      // Another caller is not refused.
      assertRateLimit(
        await call(entry.port, "/llms.txt", { client: "198.51.100.4" }),
        3,
        2,
        "other",
      );
    } finally {
      assert.equal(await entry.stop(), 0);
    }
  },
);

// Slow (about 11 s): a bound it holds is 10 s (HEADERS_TIMEOUT_MS, the recipe's nginx's); the
// decided answers are checked meanwhile.
entryTest(
  "Node's entry gives the decided answers, logs a parser's refusal uncounted, answers a late head 408 and closes a silent connection",
  async () => {
    const entry = await startNodeEntry({
      PUBLIC_BASE_URL: TEST_BASE_URL,
      RATE_LIMIT: "1000",
      ACCESS_LOG: "true",
    });
    try {
      const bounded = { timeoutMs: HEADERS_TIMEOUT_MS + 5000 };
      const silent = exchange(entry.port, "", { ...bounded, finals: 0 });
      const late = exchange(
        entry.port,
        "GET /api/v1/platform HTTP/1.1\r\nHost: localhost\r\n",
        bounded,
      );
      for (const parity of PARITY_CASES) {
        const finals = parity.expected.filter((line) => !/^HTTP\/1\.\d 1\d\d /.test(line)).length;
        const { answers } = await exchange(entry.port, parity.request(entry.port), { finals });
        assert.deepEqual(
          answers.map((answer) => `HTTP/${answer.version} ${answer.status} ${bodyKind(answer)}`),
          parity.expected,
          parity.input,
        );
      }
      // A refusal reports the caller's fields and is not counted.
      const plain = "GET /llms.txt HTTP/1.1\r\nHost: localhost\r\n\r\n";
      const before = (await exchange(entry.port, plain)).answers[0]!;
      const left = Number(before.fields.get("ratelimit-remaining"));
      const refused = (await exchange(entry.port, "HELLO\r\n\r\n")).answers[0]!;
      assert.equal(`${refused.status} ${bodyKind(refused)}`, "400 error:bad_request");
      assertRateLimit(refused, 1000, left, "a refusal");
      assertRateLimit((await exchange(entry.port, plain)).answers[0]!, 1000, left - 1, "after it");
      // Logged, with "-" for what could not be read. A client that resets its connection
      // mid-head is no refusal: not answered, not logged.
      const marked = async (path: string) => {
        await exchange(entry.port, `GET ${path} HTTP/1.1\r\nHost: localhost\r\n\r\n`);
        await entry.waitFor(() => entry.lines.some((line) => line.path === path), 5000);
        return entry.lines.filter((record) => record.method === "-");
      };
      const unread = await marked("/before-the-reset");
      assert.deepEqual(
        [unread.at(-1)?.status, unread.at(-1)?.path, unread.at(-1)?.caller],
        [400, "-", "127.0.0.0"],
      );
      await resetMidHead(entry.port);
      assert.equal((await marked("/after-the-reset")).length, unread.length, "a reset is logged");
      const [quiet, slow] = [await silent, await late];
      assert.ok(quiet.closed && quiet.answers.length === 0, "the silent connection is closed");
      assert.ok(quiet.ms >= HEADERS_TIMEOUT_MS - 100, `closed after ${quiet.ms} ms`);
      assert.ok(quiet.ms < HEADERS_TIMEOUT_MS + 3000, `closed after ${quiet.ms} ms`);
      assert.deepEqual(
        slow.answers.map((answer) => `${answer.status} ${bodyKind(answer)}`),
        ["408 error:request_timeout"],
      );
    } finally {
      assert.equal(await entry.stop(), 0);
    }
  },
);

entryTest(
  "Node's entry stops on SIGTERM without overrunning its deadline while refused clients keep their connections half-open",
  async () => {
    const entry = await startNodeEntry({ ...ENV, RATE_LIMIT: "1000" });
    let code: number | null = null;
    const clients = await Promise.all(
      RAW_ANSWERED.map((request) => answeredHalfOpen(entry.port, request)),
    );
    try {
      const started = Date.now();
      code = await entry.stop();
      const ms = Date.now() - started;
      const messages = entry.events.map((event) => String(event.message));
      assert.deepEqual(
        messages.slice(-2),
        ["shutting down: finishing requests in flight", "stopped"],
        `after ${ms} ms`,
      );
    } finally {
      for (const client of clients) client.destroy();
      if (code === null) await entry.stop();
    }
    assert.equal(code, 0);
  },
);
