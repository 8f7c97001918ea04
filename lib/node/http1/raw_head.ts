/**
 * A strict reader of one HTTP/1.x request head in the bytes Node's parser was reading when it failed
 * (`error.rawPacket`, one read from the socket). Node's parser refuses two requests that Deno serves
 * and RFC 9110/9112 allow: a method it does not know (`FOO`: the service answers 501), and a
 * `Content-Length` sent twice with one value (RFC 9112 section 6.3 processes it as that value).
 * Node's entry reads such a head here and hands it to the handler (`client_error.ts`); for any other
 * refusal, a head read here names the caller behind a proxy.
 *
 * Only what RFC 9112 section 2.2 and 5 define is read, and only whole: the request line
 * (`method SP target SP HTTP/1.0|1.1`), field lines of a token name, a colon and a value without
 * control characters, each ended by CRLF, then an empty line; no obsolete line folding, at most
 * {@linkcode MAX_FIELDS} fields, within the bytes given (at most one socket read: 64 KiB). Anything
 * else is not read (`undefined`): the request is then refused with 400.
 *
 * @module
 */

/** An HTTP/1.x request head. */
export interface RawHead {
  /** The method, as sent. */
  method: string;
  /** The request target, as sent. */
  target: string;
  /** The minor version: `1.0` or `1.1`. */
  version: "1.0" | "1.1";
  /** Field names and values in order, flattened as Node's `rawHeaders` (values trimmed). */
  fields: string[];
}

/** The most fields a head may have: as many as Deno's parser takes (libs/http_h1/parse.rs). */
export const MAX_FIELDS = 128;

/** The longest line read back from where the parser stopped to find the request line. */
const MAX_LINES_BACK = MAX_FIELDS + 1;

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const REQUEST_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) HTTP\/1\.([01])$/;
/** A field value: visible characters, spaces, tabs and obs-text; no other control character. */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

const LATIN1 = new TextDecoder("latin1");

/**
 * Reads the head of the request around `at` in `bytes`: the one whose request line is the nearest
 * line at or before `at` that reads as one (`at` is where the parser stopped: in the request line
 * for an unknown method, in a field line for a repeated `Content-Length`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const bytes = new TextEncoder().encode("FOO /x HTTP/1.1\r\nHost: a.example\r\n\r\n");
 * assert.deepEqual(readRawHead(bytes, 1), {
 *   method: "FOO",
 *   target: "/x",
 *   version: "1.1",
 *   fields: ["Host", "a.example"],
 * });
 * assert.equal(readRawHead(bytes.subarray(0, 20), 1), undefined);
 * ```
 */
export function readRawHead(bytes: Uint8Array, at: number): RawHead | undefined {
  const text = LATIN1.decode(bytes);
  const start = requestLineStart(text, Math.min(Math.max(at, 0), text.length));
  if (start === undefined) return undefined;
  const end = text.indexOf("\r\n\r\n", start);
  if (end === -1) return undefined;
  const [requestLine = "", ...lines] = text.slice(start, end).split("\r\n");
  const request = REQUEST_LINE.exec(requestLine);
  if (request === null || lines.length > MAX_FIELDS) return undefined;
  const fields: string[] = [];
  for (const line of lines) {
    const colon = line.indexOf(":");
    const name = line.slice(0, colon);
    const value = line.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, "");
    if (colon < 1 || !TOKEN.test(name) || !FIELD_VALUE.test(value)) {
      return undefined;
    }
    fields.push(name, value);
  }
  return {
    method: request[1]!,
    target: request[2]!,
    version: request[3] === "0" ? "1.0" : "1.1",
    fields,
  };
}

/**
 * Where the request line of the head around `at` starts: the start of the nearest line, at or
 * before `at`, that reads as a request line; undefined if none is found a head's length back, or
 * before the empty line that ended the head of a request before it (served already: a line the
 * parser refused after it, `HELLO`, is no request of its own, not that one again).
 */
function requestLineStart(text: string, at: number): number | undefined {
  let lineStart = text.lastIndexOf("\n", at - 1) + 1;
  for (let back = 0; back < MAX_LINES_BACK; back++) {
    const lineEnd = text.indexOf("\r\n", lineStart);
    const line = text.slice(lineStart, lineEnd === -1 ? text.length : lineEnd);
    if (REQUEST_LINE.test(line)) return lineStart;
    if (lineStart === 0 || (line === "" && back > 0)) return undefined;
    lineStart = text.lastIndexOf("\n", lineStart - 2) + 1;
  }
  return undefined;
}
