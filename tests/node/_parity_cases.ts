/**
 * The decided answer to each request whose answer differed between Node's entry and Deno's
 * (issue 55's eleven raw requests and their neighbours), as lib/node/README.md's table gives it with
 * its reason (RFC 9110/9112): the status line's version and status, and the body's kind (`empty`,
 * `error:<code>`, or the media type). Node's entry is held to it by tests/node/entry_test.ts
 * (`npm test`), and Node's and Deno's together by tests/node/parity_test.ts.
 *
 * Where Deno's runtime answers itself (its parser's 400, without a body) and the service cannot
 * change it, `deno` says so; Node's entry answers those with the Error body.
 *
 * @module
 */

/** One answer: `HTTP/<version> <status> <body kind>`. */
export type Expected = `HTTP/1.${0 | 1} ${number} ${string}`;

/** One request and the answers decided for it. */
export interface ParityCase {
  /** The request, as lib/node/README.md's table names it. */
  input: string;
  /** Its bytes, given the server's port. */
  request(port: number): string;
  /** The answers, in order (interim 1xx ones included): Node's and Deno's. */
  expected: Expected[];
  /** Deno's, where its runtime answers otherwise and the service cannot change it. */
  deno?: Expected[];
  /** Whether one of the eleven raw requests of issue 55 (and a plain GET). */
  eleven: boolean;
}

const PLATFORM = "/api/v1/platform";
const HOST = "Host: localhost\r\n";
const JSON_OK: Expected = "HTTP/1.1 200 application/json";

/** A request line, `Host`, `fields`, an empty line, `body`. */
function get(fields = "", line = `GET ${PLATFORM} HTTP/1.1`, body = ""): string {
  return `${line}\r\n${HOST}${fields}\r\n${body}`;
}

/** The decided answers (lib/node/README.md, "One answer per request"). */
export const PARITY_CASES: readonly ParityCase[] = [
  { input: "GET /api/v1/platform", request: () => get(), expected: [JSON_OK], eleven: true },
  {
    input: "CONNECT localhost:PORT",
    request: (port) => `CONNECT localhost:${port} HTTP/1.1\r\nHost: localhost:${port}\r\n\r\n`,
    expected: ["HTTP/1.1 405 error:method_not_allowed"],
    eleven: true,
  },
  {
    input: "FOO /api/v1/platform",
    request: () => get("", `FOO ${PLATFORM} HTTP/1.1`),
    expected: ["HTTP/1.1 501 error:not_implemented"],
    eleven: true,
  },
  {
    input: "GET http://localhost/api/v1/platform",
    request: () => get("", `GET http://localhost${PLATFORM} HTTP/1.1`),
    expected: [JSON_OK],
    eleven: true,
  },
  {
    input: "OPTIONS *",
    request: () => get("", "OPTIONS * HTTP/1.1"),
    expected: ["HTTP/1.1 204 empty"],
    eleven: true,
  },
  {
    input: "a 17 KB header field",
    request: () => get(`X-Big: ${"a".repeat(17 * 1024)}\r\n`),
    expected: [JSON_OK],
    eleven: true,
  },
  {
    input: "Content-Length: 0 twice",
    request: () => get("Content-Length: 0\r\nContent-Length: 0\r\n"),
    expected: [JSON_OK],
    eleven: true,
  },
  {
    input: "Expect: bogus",
    request: () => get("Expect: bogus\r\n"),
    expected: [JSON_OK],
    eleven: true,
  },
  {
    input: "HTTP/1.0",
    request: () => get("", `GET ${PLATFORM} HTTP/1.0`),
    expected: ["HTTP/1.0 200 application/json"],
    eleven: true,
  },
  {
    input: "no Host",
    request: () => `GET ${PLATFORM} HTTP/1.1\r\n\r\n`,
    expected: ["HTTP/1.1 400 error:bad_request"],
    eleven: true,
  },
  {
    input: "an empty Host",
    request: () => `GET ${PLATFORM} HTTP/1.1\r\nHost: \r\n\r\n`,
    expected: ["HTTP/1.1 400 error:bad_request"],
    eleven: true,
  },
  {
    input: "HTTP/1.0 without Host",
    request: () => `GET ${PLATFORM} HTTP/1.0\r\n\r\n`,
    expected: ["HTTP/1.0 400 error:bad_request"],
    eleven: false,
  },
  {
    input: "Expect: 100-continue, with a body",
    request: () =>
      get("Expect: 100-continue\r\nContent-Length: 5\r\n", `POST ${PLATFORM} HTTP/1.1`, "hello"),
    expected: ["HTTP/1.1 100 empty", "HTTP/1.1 405 error:method_not_allowed"],
    eleven: false,
  },
  {
    input: "Expect: 100-continue, no body",
    request: () => get("Expect: 100-continue\r\n"),
    expected: [JSON_OK],
    eleven: false,
  },
  {
    input: "FOO after a GET, one connection",
    request: () => get() + get("", `FOO ${PLATFORM} HTTP/1.1`),
    expected: [JSON_OK, "HTTP/1.1 501 error:not_implemented"],
    eleven: false,
  },
  {
    input: "get (lower case)",
    request: () => get("", `get ${PLATFORM} HTTP/1.1`),
    expected: ["HTTP/1.1 501 error:not_implemented"],
    eleven: false,
  },
  {
    input: "PROPFIND",
    request: () => get("", `PROPFIND ${PLATFORM} HTTP/1.1`),
    expected: ["HTTP/1.1 501 error:not_implemented"],
    eleven: false,
  },
  {
    input: "TRACE",
    request: () => get("", `TRACE ${PLATFORM} HTTP/1.1`),
    expected: ["HTTP/1.1 405 error:method_not_allowed"],
    eleven: false,
  },
  {
    input: "OPTIONS /nowhere",
    request: () => get("", "OPTIONS /nowhere HTTP/1.1"),
    expected: ["HTTP/1.1 404 error:not_found"],
    eleven: false,
  },
  {
    input: "two Host fields",
    request: () => get("Host: other.example\r\n"),
    expected: ["HTTP/1.1 400 error:bad_request"],
    deno: ["HTTP/1.1 400 empty"],
    eleven: false,
  },
  {
    input: "a head over 64 KiB",
    request: () => get(`X-Big: ${"a".repeat(70 * 1024)}\r\n`),
    expected: ["HTTP/1.1 400 error:bad_request"],
    deno: ["HTTP/1.1 400 empty"],
    eleven: false,
  },
  {
    input: "129 fields",
    request: () => get(Array.from({ length: 128 }, (_, i) => `X-F${i}: v\r\n`).join("")),
    expected: ["HTTP/1.1 400 error:bad_request"],
    deno: ["HTTP/1.1 400 empty"],
    eleven: false,
  },
  {
    input: "GET *",
    request: () => get("", "GET * HTTP/1.1"),
    expected: ["HTTP/1.1 400 error:bad_request"],
    deno: ["HTTP/1.1 400 empty"],
    eleven: false,
  },
  {
    input: "Content-Length: 0 and 1",
    request: () => get("Content-Length: 0\r\nContent-Length: 1\r\n", undefined, "x"),
    expected: ["HTTP/1.1 400 error:bad_request"],
    deno: ["HTTP/1.1 400 empty"],
    eleven: false,
  },
  {
    input: "not a request line",
    request: () => "HELLO\r\n\r\n",
    expected: ["HTTP/1.1 400 error:bad_request"],
    deno: ["HTTP/1.1 400 empty"],
    eleven: false,
  },
];
