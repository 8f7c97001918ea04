/**
 * Whether two answers to one request are the same answer: the status, every field that does not
 * change per request, and the body's bytes; where one sent a content coding the other had not built
 * yet (each builds its compressed bodies in its warm-up; the in-process test server has none), the
 * representation compared decoded, its ETag without the coding's suffix.
 *
 * @module
 */

import assert from "node:assert/strict";
import { decodeBody } from "./_contract.ts";
import type { RawResponse } from "./_server.ts";

/** Fields that differ between two answers by nature: the date, the connection, the window. */
export const PER_REQUEST: ReadonlySet<string> = new Set([
  "date",
  "connection",
  "keep-alive",
  "ratelimit",
  "ratelimit-remaining",
  "ratelimit-reset",
  "retry-after",
]);

/** The fields of `response` that do not change per request, lower-case, sorted. */
export function fixedFields(response: RawResponse): Array<[string, string]> {
  return [...response.headers].filter(([name]) => !PER_REQUEST.has(name)).sort();
}

/**
 * Asserts that `actual` is `expected`'s answer: the status, the fixed fields and the body's bytes
 * (decoded where only one of them is encoded).
 */
export function assertSameAnswer(actual: RawResponse, expected: RawResponse, what: string): void {
  assert.equal(actual.status, expected.status, what);
  const coding = (response: RawResponse) => response.headers.get("content-encoding");
  if (coding(actual) === coding(expected)) {
    assert.deepEqual(fixedFields(actual), fixedFields(expected), what);
    assert.deepEqual(actual.body, expected.body, what);
    return;
  }
  const decoded = (response: RawResponse) => ({
    fields: fixedFields(response)
      .filter(([name]) => name !== "content-encoding" && name !== "content-length")
      .map(([name, value]) => [name, name === "etag" ? value.replace(/-(br|gzip)"$/, '"') : value]),
    body: decodeBody(response.body, coding(response)),
  });
  assert.deepEqual(decoded(actual), decoded(expected), `${what} (decoded)`);
}
