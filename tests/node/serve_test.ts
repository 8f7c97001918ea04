/**
 * Tests of Node's adapter (lib/node/serve.ts) with a handler whose GET waits as a shared store's
 * round trip does (Redis, KV, a Durable Object), on a real loopback port, on the Node that runs them
 * (`npm test`, tests/node/node_files.json):
 *
 * - an answer Node's server does not write itself (a parser's refusal, a request Deno serves that
 *   Node's parser refuses, a CONNECT) comes after the slower response to the request before it on
 *   its connection, which is not lost (lib/node/http1/in_flight.ts), and after the responses
 *   answered at once, the second of which waits for the first's socket;
 * - a connection so answered is destroyed when the client closes its side, or after the linger if
 *   it never does, and `shutdown()` waits for it no longer (lib/node/http1/raw_response.ts);
 * - a parser error in the body of a request the handler answered gets no answer of its own.
 *
 * Under `deno test` these are ignored: Deno's `node:http` has no parser of Node's to refuse them.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type NodeHandler, type NodeServer, serveNode } from "../../lib/node/serve.ts";
import { LINGER_MS } from "../../lib/node/http1/raw_response.ts";
import { createWire } from "../../lib/respond/wire.ts";
import { answeredHalfOpen, exchange, RAW_ANSWERED } from "./_raw_http.ts";

/** Why these tests do not run under Deno, or undefined on Node (the harness's `Deno` has no version). */
const notOnNode = "version" in Deno
  ? "run on Node by npm test, which tests/node/node_test.ts runs on Node 24 and 26"
  : undefined;

/** A test of `serveNode()` on Node, ignored under Deno with the reason in its name. */
function nodeTest(name: string, fn: () => Promise<void>): void {
  Deno.test({
    name: notOnNode === undefined ? name : `${name} (ignored: ${notOnNode})`,
    ignore: notOnNode !== undefined,
    fn,
  });
}

/** How long the handler takes to answer a GET, in ms: a store's round trip, a slow one. */
const STORE_ROUND_TRIP_MS = 100;

/**
 * The body of `GET /now/big`: the size of Linux's largest TCP send buffer (`tcp_wmem`'s 4 MiB), so
 * that its response is not written whole at once and is still being written when the requests after
 * it are answered.
 */
const BIG_BODY = "x".repeat(4 * 1024 * 1024);

/**
 * A handler that answers GET 200 after {@linkcode STORE_ROUND_TRIP_MS} (a path under `/now/` at
 * once, with no promise, as the memory store decides), any other method at once with 501 (`CONNECT`
 * 405, as the service does), and a refusal 400; each body names what it answers. Node's adapter
 * sends the handler's `answer` through its `wire` (lib/node/fast_path.ts), so the handler gives
 * those, `fetch` being unused there.
 */
function slowStoreHandler(): NodeHandler {
  const answerOf = (status: number, body: string) => ({
    template: { status, body, fields: [] },
    decision: { allowed: true, remaining: 59, resetSeconds: 60 },
    outcome: undefined,
  });
  const answer = (request: Request) => {
    const path = new URL(request.url).pathname;
    if (request.method === "GET" && path === "/now/big") return answerOf(200, BIG_BODY);
    if (request.method === "GET" && path.startsWith("/now/")) return answerOf(200, `GET ${path}`);
    if (request.method === "GET") {
      return new Promise((resolve) => setTimeout(resolve, STORE_ROUND_TRIP_MS))
        .then(() => answerOf(200, `GET ${path}`));
    }
    return answerOf(request.method === "CONNECT" ? 405 : 501, `${request.method} ${path}`);
  };
  const handler = async (request: Request) => {
    const { template } = await answer(request);
    return new Response(template.body, { status: template.status });
  };
  return Object.assign(handler, {
    answer,
    wire: createWire({ policy: '"default";q=60;w=60', limit: "60" }),
    refuse: (refusal: string) => new Response(refusal, { status: 400 }),
  }) as unknown as NodeHandler;
}

/** Serves the slow handler on a loopback port 0, runs `body`, and closes every connection after. */
async function withServer(body: (server: NodeServer) => Promise<void>): Promise<void> {
  const server = await serveNode(slowStoreHandler(), { hostname: "127.0.0.1", port: 0 });
  try {
    await body(server);
  } finally {
    server.closeAll();
    await server.shutdown();
  }
}

const HOST = "Host: localhost\r\n";
const GET_A = `GET /a HTTP/1.1\r\n${HOST}\r\n`;

nodeTest(
  "serveNode() writes a refusal, a request Node's parser refuses and a CONNECT after the slower response before each on its connection",
  async () => {
    await withServer(async (server) => {
      const cases = [
        { second: `FOO /b HTTP/1.1\r\n${HOST}\r\n`, answer: "501 FOO /b" },
        { second: "HELLO\r\n\r\n", answer: "400 bad_request" },
        {
          second: `CONNECT localhost:1 HTTP/1.1\r\nHost: localhost:1\r\n\r\n`,
          answer: "405 CONNECT /",
        },
        { second: `GET /b HTTP/1.1\r\n${HOST}\r\n`, answer: "200 GET /b" },
      ];
      for (const { second, answer } of cases) {
        // Pipelined: the second request arrives while the first one's handler waits.
        const { answers } = await exchange(server.port, GET_A + second, { finals: 2 });
        assert.deepEqual(
          answers.map((one) => `${one.status} ${new TextDecoder().decode(one.body)}`),
          ["200 GET /a", answer],
          JSON.stringify(second),
        );
      }
    });
  },
);

nodeTest(
  "serveNode() writes an answer Node's server does not write after the responses answered at once before it, one queued behind the other",
  async () => {
    await withServer(async (server) => {
      const refused = `FOO /c HTTP/1.1\r\n${HOST}\r\n`;
      const now = (path: string) => `GET /now/${path} HTTP/1.1\r\n${HOST}\r\n`;
      const cases = [
        // Both at once: the second is answered while the first still holds the socket.
        { sent: now("a") + now("b") + refused, want: ["200 GET /now/a", "200 GET /now/b"] },
        // The first one still being written when the refusal is answered.
        { sent: now("big") + now("b") + refused, want: ["200 4194304 bytes", "200 GET /now/b"] },
        // At once behind a slow one: queued until the slow one is written.
        { sent: GET_A + now("b") + refused, want: ["200 GET /a", "200 GET /now/b"] },
      ];
      for (const { sent, want } of cases) {
        // Pipelined in one write, so that the parser refuses FOO while the others are in flight.
        const { answers } = await exchange(server.port, sent, { finals: 3 });
        assert.deepEqual(
          answers.map((one) =>
            `${one.status} ${
              one.body.length > 100
                ? `${one.body.length} bytes`
                : new TextDecoder().decode(one.body)
            }`
          ),
          [...want, "501 FOO /c"],
          JSON.stringify(sent),
        );
      }
    });
  },
);

/** How long `server.shutdown()` takes, or rejects after `limitMs` (the server then closed at once). */
async function shutdownMs(server: NodeServer, limitMs: number): Promise<number> {
  const started = Date.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`shutdown() not resolved in ${limitMs} ms`)),
      limitMs,
    );
  });
  try {
    await Promise.race([server.shutdown(), late]);
    return Date.now() - started;
  } finally {
    clearTimeout(timer);
  }
}

// Slow (about LINGER_MS, 1 s): it waits for the linger of the clients that never close.
nodeTest(
  "serveNode() destroys a connection it answered raw within LINGER_MS when the client keeps it half-open, and shutdown() waits no longer",
  async () => {
    await withServer(async (server) => {
      const clients = await Promise.all(
        RAW_ANSWERED.map((request) => answeredHalfOpen(server.port, request)),
      );
      try {
        const ms = await shutdownMs(server, LINGER_MS * 5);
        assert.ok(ms <= LINGER_MS + 500, `shutdown() took ${ms} ms`);
      } finally {
        for (const client of clients) client.destroy();
      }
    });
  },
);

nodeTest(
  "serveNode() destroys a connection it answered raw as soon as the client closes its side",
  async () => {
    await withServer(async (server) => {
      await Promise.all(
        RAW_ANSWERED.map((request) => answeredHalfOpen(server.port, request, { close: true })),
      );
      const ms = await shutdownMs(server, LINGER_MS * 5);
      // Not the linger: the clients' close is read at once.
      assert.ok(ms < LINGER_MS / 2, `shutdown() took ${ms} ms`);
    });
  },
);

nodeTest(
  "serveNode() answers nothing more when Node's parser fails in the body of a request the handler answered: the connection closes after that one answer",
  async () => {
    await withServer(async (server) => {
      // A chunk size that is not hex, after the head the handler answered at once (501).
      const sent = `POST /now/x HTTP/1.1\r\n${HOST}Transfer-Encoding: chunked\r\n\r\nZZZ\r\n`;
      const { answers, closed } = await exchange(server.port, sent, { finals: 0 });
      assert.deepEqual(
        answers.map((one) => `${one.status} ${new TextDecoder().decode(one.body)}`),
        ["501 POST /now/x"],
      );
      assert.ok(closed, "the connection is closed");
    });
  },
);
