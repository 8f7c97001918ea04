/**
 * The `ServerResponse` of Node's entry: an HTTP/1.0 request is answered with an HTTP/1.0 status line,
 * as Deno answers it (libs/http_h1/write.rs writes the request's version), where Node's own writes
 * `HTTP/1.1` to every request (lib/node/README.md, "One answer per request"). Nothing else differs:
 * Node already answers an HTTP/1.0 request as one (no chunked body, the connection closed unless
 * the request asked to keep it).
 *
 * Node builds the status line in `writeHead` and hands it to `_storeHeader`, which every version of
 * Node 24 and 26 has (`lib/_http_server.js`); tests/node/entry_test.ts holds the line on both.
 *
 * @module
 */

import { ServerResponse } from "node:http";

/** Node's own method that stores the head, with the status line it was given first. */
type StoreHeader = (this: ServerResponse, firstLine: string, headers: unknown) => void;

/** Node's `_storeHeader` of every response, the one this class calls with its own status line. */
const STORE_HEADER = (ServerResponse.prototype as unknown as { _storeHeader: StoreHeader })
  ._storeHeader;

/** A response whose status line carries the request's version, HTTP/1.0 or HTTP/1.1. */
export class VersionedResponse extends ServerResponse {
  /** Stores the head with the request's version in the status line (Node's `_storeHeader`). */
  _storeHeader(firstLine: string, headers: unknown): void {
    const http10 = this.req.httpVersionMajor === 1 && this.req.httpVersionMinor === 0;
    const line = http10 && firstLine.startsWith("HTTP/1.1 ")
      ? `HTTP/1.0${firstLine.slice(8)}`
      : firstLine;
    STORE_HEADER.call(this, line, headers);
  }
}
