/**
 * Tests of the batched access log and of the recorder that makes one record per request.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  type AccessRecord,
  createAccessLog,
  createAccessRecorder,
  formatAccessRecord,
  truncatedAddress,
} from "../lib/access_log.ts";
import { NO_ADDRESS_KEY } from "../lib/limit/caller/caller_key.ts";
import { lazyGlobalsReadBy } from "./_lazy_globals.ts";
import { rawRequest, startServer } from "./_server.ts";

const RECORD: AccessRecord = {
  time: "2026-01-01T00:00:00.000Z",
  method: "GET",
  path: '/a"b',
  status: 200,
  ms: 0.25,
  caller: "192.0.2.0",
};

Deno.test("formatAccessRecord() writes one valid JSON line", () => {
  const line = formatAccessRecord(RECORD);
  assert.ok(line.endsWith("\n"));
  assert.equal(line.indexOf("\n"), line.length - 1);
  assert.deepEqual(JSON.parse(line), RECORD);
});

Deno.test("createAccessLog() batches lines and writes them all on flush, in order", () => {
  const chunks: string[] = [];
  const log = createAccessLog((chunk) => chunks.push(chunk), {
    flushMs: 60_000,
  });
  log.log(RECORD);
  log.log({ ...RECORD, status: 404 });
  assert.equal(chunks.length, 0, "nothing is written per request");
  log.flush();
  assert.equal(chunks.length, 1);
  assert.deepEqual(chunks[0]!.trim().split("\n").map((l) => JSON.parse(l).status), [200, 404]);
  log.flush();
  assert.equal(chunks.length, 1, "an empty flush writes nothing");
});

Deno.test("createAccessLog() writes at once when the buffer is full", () => {
  const chunks: string[] = [];
  const log = createAccessLog((chunk) => chunks.push(chunk), { flushMs: 60_000, maxBuffer: 200 });
  for (let i = 0; i < 5; i++) log.log(RECORD);
  assert.ok(chunks.length >= 1);
  log.flush();
  const lines = chunks.join("").trim().split("\n");
  assert.equal(lines.length, 5);
});

Deno.test("createAccessRecorder() truncates the caller, keeps the path as given and times the handler", () => {
  const records: AccessRecord[] = [];
  let clock = 1_767_225_600_000;
  const record = createAccessRecorder((r) => records.push(r), () => clock);
  clock += 1.25;
  record("HEAD", "/developers", "2001:0db8:0001:0002::/64", 1_767_225_600_000, 304);
  record("GET", "/", NO_ADDRESS_KEY, 1_767_225_600_000, 200);
  assert.deepEqual(records, [
    {
      time: "2026-01-01T00:00:00.000Z",
      method: "HEAD",
      path: "/developers",
      status: 304,
      ms: 1.25,
      caller: "2001:db8:1::",
    },
    {
      time: "2026-01-01T00:00:00.000Z",
      method: "GET",
      path: "/",
      status: 200,
      ms: 1.25,
      caller: "unix",
    },
  ]);
});

Deno.test("createAccessRecorder() gives each request its own caller and time when keys and milliseconds alternate", () => {
  const records: AccessRecord[] = [];
  const record = createAccessRecorder((r) => records.push(r), () => 0);
  const requests: Array<[string, number]> = [
    // A request that failed before its caller key was known (answered 500) logs an empty key.
    ["", 0],
    ["192.0.2.77", 0],
    ["192.0.2.77", 0],
    ["198.51.100.9", 0],
    ["192.0.2.77", 1],
    [NO_ADDRESS_KEY, 1],
    ["2001:0db8:0001:0002::/64", 0],
    [NO_ADDRESS_KEY, 0],
    ["192.0.2.77", 0],
  ];
  for (const [key, started] of requests) record("GET", "/", key, started, 200);
  assert.deepEqual(records.map((r) => [r.caller, r.time]), [
    ["unknown", "1970-01-01T00:00:00.000Z"],
    ["192.0.2.0", "1970-01-01T00:00:00.000Z"],
    ["192.0.2.0", "1970-01-01T00:00:00.000Z"],
    ["198.51.100.0", "1970-01-01T00:00:00.000Z"],
    ["192.0.2.0", "1970-01-01T00:00:00.001Z"],
    ["unix", "1970-01-01T00:00:00.001Z"],
    ["2001:db8:1::", "1970-01-01T00:00:00.000Z"],
    ["unix", "1970-01-01T00:00:00.000Z"],
    ["192.0.2.0", "1970-01-01T00:00:00.000Z"],
  ]);
});

Deno.test("createAccessLog() schedules its first flush without reading a lazily loaded global (Node's timers)", () => {
  const chunks: string[] = [];
  const log = createAccessLog((chunk) => chunks.push(chunk));
  const read = lazyGlobalsReadBy(() => log.log(RECORD));
  log.flush();
  assert.deepEqual(read, []);
  assert.equal(chunks[0], formatAccessRecord(RECORD));
});

Deno.test("createAccessLog() writes what it holds once flushMs has passed", async () => {
  const chunks: string[] = [];
  const log = createAccessLog((chunk) => chunks.push(chunk), { flushMs: 10 });
  log.log(RECORD);
  assert.equal(chunks.length, 0);
  const deadline = Date.now() + 5_000;
  while (chunks.length === 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  assert.equal(chunks[0], formatAccessRecord(RECORD));
});

Deno.test("the access log names the request target's path whatever Host says, and a request refused for its Host says so", async () => {
  await using server = await startServer();
  const cases: [host: string, target: string, path: string][] = [
    ["evil.example/fake/path?", "/api/v1/platform", "/api/v1/platform"],
    ["x/api/v1/platform?", "/anything?q=1", "/anything"],
    ["x#/developers", "/nothing", "/nothing"],
  ];
  for (const [host, target, path] of cases) {
    const response = await rawRequest(server.url, target, { headers: { Host: host } });
    assert.equal(response.status, 400);
    const record = server.records.at(-1)!;
    assert.equal(record.path, path, `Host: ${host}`);
    assert.equal(record.host, "invalid");
    assert.match(formatAccessRecord(record), /"host":"invalid"\}\n$/);
  }
  await rawRequest(server.url, "/api/v1/platform?x=1");
  assert.equal(server.records.at(-1)!.path, "/api/v1/platform");
  assert.equal(server.records.at(-1)!.host, undefined);
});

Deno.test("truncatedAddress() keeps /24 of IPv4 and /48 of IPv6, never the whole address", () => {
  assert.equal(truncatedAddress("203.0.113.77"), "203.0.113.0");
  assert.equal(truncatedAddress("::ffff:203.0.113.77"), "203.0.113.0");
  assert.equal(truncatedAddress("2001:db8:aa:bb::1"), "2001:db8:aa::");
  assert.equal(truncatedAddress("not an address"), "unknown");
});
