/**
 * Whether two answers to one request are the same answer: the status, every field that does not
 * change per request, and the body's bytes; where one sent a content coding the other had not built
 * yet (each builds its compressed bodies in its warm-up; the in-process test server has none), the
 * representation compared decoded, and each ETag held to the rule that it names the bytes sent: the
 * SHA-256 of the body received, with the coding appended for a coded one (`lib/http/representation.ts`).
 *
 * @module
 */

import assert from "node:assert/strict";
import { toBase64 } from "../lib/text/base64.ts";
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
 * (decoded where only one of them is encoded, each ETag then checked against its own bytes).
 */
export async function assertSameAnswer(
  actual: RawResponse,
  expected: RawResponse,
  what: string,
): Promise<void> {
  assert.equal(actual.status, expected.status, what);
  const coding = (response: RawResponse) => response.headers.get("content-encoding");
  if (coding(actual) === coding(expected)) {
    assert.deepEqual(fixedFields(actual), fixedFields(expected), what);
    assert.deepEqual(actual.body, expected.body, what);
    return;
  }
  const decoded = (response: RawResponse) => ({
    fields: fixedFields(response)
      .filter(([name]) => !["content-encoding", "content-length", "etag"].includes(name)),
    body: decodeBody(response.body, coding(response)),
  });
  assert.deepEqual(decoded(actual), decoded(expected), `${what} (decoded)`);
  for (const [side, response] of [["actual", actual], ["expected", expected]] as const) {
    const etag = response.headers.get("etag");
    if (etag === null) continue;
    const suffix = coding(response) === null ? "" : `-${coding(response)}`;
    assert.equal(etag, `"${await tagOf(response.body)}${suffix}"`, `${what}: ${side}'s ETag`);
  }
  // A tag on one side only would be a field the other lacks.
  assert.equal(actual.headers.has("etag"), expected.headers.has("etag"), `${what}: ETag on both`);
}

/** The tag of `bytes` as the service makes it: SHA-256, base64url without padding. */
async function tagOf(bytes: Uint8Array): Promise<string> {
  const hash = await crypto.subtle.digest("SHA-256", new Uint8Array(bytes));
  return toBase64(new Uint8Array(hash), true);
}
