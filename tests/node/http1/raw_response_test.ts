/**
 * Tests of the answer Node's entry writes straight onto a socket (lib/node/http1/raw_response.ts).
 *
 * @module
 */

import assert from "node:assert/strict";
import { rawResponseBytes } from "../../../lib/node/http1/raw_response.ts";

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

Deno.test("rawResponseBytes() writes the status line in the request's version, the fields, date, close and length", async () => {
  const response = new Response('{"a":1}', {
    status: 501,
    headers: [["content-type", "application/json"], ["ratelimit-remaining", "59"]],
  });
  const written = text(await rawResponseBytes(response, { version: "1.0", head: false }));
  const [head = "", body] = written.split("\r\n\r\n");
  const [statusLine, ...lines] = head.split("\r\n");
  assert.equal(statusLine, "HTTP/1.0 501 Not Implemented");
  assert.deepEqual(lines.filter((line) => !line.startsWith("date: ")), [
    "content-type: application/json",
    "ratelimit-remaining: 59",
    "connection: close",
    "content-length: 7",
  ]);
  assert.match(
    lines.find((line) => line.startsWith("date: ")) ?? "",
    /^date: \w{3}, \d{2} \w{3} \d{4}/,
  );
  assert.equal(body, '{"a":1}');
});

Deno.test("rawResponseBytes() writes no body for HEAD, nor a length for a response without one", async () => {
  const head = await rawResponseBytes(new Response("hello", { status: 200 }), {
    version: "1.1",
    head: true,
  });
  assert.match(text(head), /^HTTP\/1\.1 200 OK\r\n[^]*content-length: 5\r\n\r\n$/);
  const empty = await rawResponseBytes(new Response(null, { status: 204 }), {
    version: "1.1",
    head: false,
  });
  assert.doesNotMatch(text(empty), /content-length/);
  assert.match(text(empty), /\r\nconnection: close\r\n\r\n$/);
});
