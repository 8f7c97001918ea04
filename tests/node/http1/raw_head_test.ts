/**
 * Tests of the strict reader of a request head Node's parser refused (lib/node/http1/raw_head.ts):
 * what it reads, where it finds the request in the bytes, and everything it refuses to read.
 *
 * @module
 */

import assert from "node:assert/strict";
import { MAX_FIELDS, readRawHead } from "../../../lib/node/http1/raw_head.ts";

const bytes = (text: string) => Uint8Array.from(text, (c) => c.charCodeAt(0));

Deno.test("readRawHead() reads a head's method, target, version and fields, values trimmed", () => {
  const head = readRawHead(
    bytes("FOO /a?b HTTP/1.0\r\nHost: a.example\r\nX-Two:  v  w \t\r\nEmpty:\r\n\r\nbody"),
    1,
  );
  assert.deepEqual(head, {
    method: "FOO",
    target: "/a?b",
    version: "1.0",
    fields: ["Host", "a.example", "X-Two", "v  w", "Empty", ""],
  });
});

Deno.test("readRawHead() finds the request around where the parser stopped, after one it served", () => {
  const served = "GET /first HTTP/1.1\r\nHost: a\r\n\r\n";
  const refused = "FOO /second HTTP/1.1\r\nHost: b\r\n\r\n";
  // Node's parser stops in the method of the second request...
  assert.equal(readRawHead(bytes(served + refused), served.length + 1)?.target, "/second");
  // ... or in a field line (a repeated Content-Length): the request line is found back from there.
  const repeated =
    "GET /third HTTP/1.1\r\nHost: c\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n";
  const at = served.length + repeated.lastIndexOf("Content-Length") + 5;
  assert.deepEqual(readRawHead(bytes(served + repeated), at)?.fields, [
    "Host",
    "c",
    "Content-Length",
    "0",
    "Content-Length",
    "0",
  ]);
});

Deno.test("readRawHead() reads nothing it cannot read whole and strictly", () => {
  const refused = [
    "FOO /x HTTP/1.1\r\nHost: a\r\n", // not ended
    "FOO /x HTTP/2.0\r\nHost: a\r\n\r\n", // not HTTP/1.x
    "FOO  /x HTTP/1.1\r\nHost: a\r\n\r\n", // two spaces
    "F(O /x HTTP/1.1\r\nHost: a\r\n\r\n", // a method that is not a token
    "FOO /x HTTP/1.1\r\nHo st: a\r\n\r\n", // a field name that is not a token
    "FOO /x HTTP/1.1\r\n: a\r\n\r\n", // no name
    "FOO /x HTTP/1.1\r\nHost a\r\n\r\n", // no colon
    "FOO /x HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", // obsolete line folding
    "FOO /x HTTP/1.1\r\nHost: a\x00b\r\n\r\n", // a control character
    "FOO /x HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", // a bare line feed
    "HELLO\r\n\r\n", // no request line
  ];
  for (const text of refused) {
    assert.equal(readRawHead(bytes(text), 1), undefined, JSON.stringify(text));
  }
  // A line that is no request, after a request already served in the same read: not that one.
  const served = "GET /first HTTP/1.1\r\nHost: a\r\n\r\n";
  assert.equal(readRawHead(bytes(`${served}HELLO\r\n\r\n`), served.length + 1), undefined);
  assert.equal(readRawHead(bytes(`${served}\r\nHELLO\r\n\r\n`), served.length + 3), undefined);
});

Deno.test("readRawHead() reads at most as many fields as Deno's parser takes", () => {
  const fields = (count: number) =>
    Array.from({ length: count }, (_, i) => `X-${i}: v\r\n`).join("");
  const head = (count: number) => bytes(`FOO / HTTP/1.1\r\n${fields(count)}\r\n`);
  assert.equal(readRawHead(head(MAX_FIELDS), 1)?.fields.length, 2 * MAX_FIELDS);
  assert.equal(readRawHead(head(MAX_FIELDS + 1), 1), undefined);
});

Deno.test("readRawHead() keeps obs-text in a value as Node does (latin1)", () => {
  const head = readRawHead(
    Uint8Array.of(...bytes("FOO / HTTP/1.1\r\nX: "), 0xe9, ...bytes("\r\n\r\n")),
    1,
  );
  assert.deepEqual(head?.fields, ["X", "\u00e9"]);
});
