/**
 * The service's br and gzip bodies on Node, compressed as Deno compresses them: Deno's
 * `CompressionStream` (ext/web/compression.rs) writes brotli at quality 6 with a 2^22-byte window
 * and gzip at level 6, each body in one write that it flushes, then finishes. Node's own
 * `CompressionStream` compresses brotli at quality 11, and so sent other bodies than Deno for every
 * path (169 bytes against 206 for the discovery document). `node:zlib` is built into Node (no
 * compatibility layer: Node's `CompressionStream` is this same zlib).
 *
 * The bytes are Deno's for most bodies, not all: Deno's brotli is a Rust port (the `brotli` crate,
 * 6.0), Node's Google's C library (1.2), and they part on some bodies by a few bytes; Deno's gzip is
 * zlib-ng, Node's Chromium's zlib, whose deflate streams differ (lib/node/README.md, "Compressed
 * bodies"). Each variant's ETag names its own bytes (lib/http/representation.ts), so a tag never
 * names two bodies.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import {
  type BrotliCompress,
  constants,
  createBrotliCompress,
  createGzip,
  type Gzip,
} from "node:zlib";

/** Deno's brotli quality: Google's nginx default for compressing on the fly. */
const BROTLI_QUALITY = 6;
/** Deno's brotli window: 2^22 bytes. */
const BROTLI_WINDOW_BITS = 22;
/** Deno's gzip level: zlib's default. */
const GZIP_LEVEL = 6;

/**
 * Compresses `bytes` in `encoding` with Deno's settings.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { brotliDecompressSync } from "node:zlib";
 * const text = new TextEncoder().encode("compress me ".repeat(100));
 * const br = await compressLikeDeno(text, "br");
 * assert.ok(br.length < text.length);
 * assert.deepEqual(new Uint8Array(brotliDecompressSync(br)), text);
 * ```
 */
export function compressLikeDeno(
  bytes: Uint8Array<ArrayBuffer>,
  encoding: "br" | "gzip",
): Promise<Uint8Array<ArrayBuffer>> {
  return encoding === "br"
    ? oneFlushedWrite(
      createBrotliCompress({
        params: {
          [constants.BROTLI_PARAM_QUALITY]: BROTLI_QUALITY,
          [constants.BROTLI_PARAM_LGWIN]: BROTLI_WINDOW_BITS,
        },
      }),
      constants.BROTLI_OPERATION_FLUSH,
      bytes,
    )
    : oneFlushedWrite(createGzip({ level: GZIP_LEVEL }), constants.Z_SYNC_FLUSH, bytes);
}

/** Writes `bytes` to `stream` in one write, flushes with `flush`, finishes, and gathers the output. */
function oneFlushedWrite(
  stream: BrotliCompress | Gzip,
  flush: number,
  bytes: Uint8Array,
): Promise<Uint8Array<ArrayBuffer>> {
  return new Promise((resolve, reject) => {
    const chunks: Uint8Array[] = [];
    stream.on("data", (chunk: Uint8Array) => chunks.push(chunk));
    stream.on("error", reject);
    stream.on("end", () => resolve(Buffer.concat(chunks)));
    stream.write(bytes);
    stream.flush(flush, () => stream.end());
  });
}
