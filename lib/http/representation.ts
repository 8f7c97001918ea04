/**
 * Representations built once at start-up: a body in every content coding, each with its ETag and the
 * header fields that never change between requests.
 *
 * Every 200 body of the service is known when it starts, so compression and hashing happen here,
 * never on the hot path: the identity body and its ETag at once, each compressed body the first time
 * a request asks for that coding (or when the service warms up after it listens).
 *
 * @module
 */

import { brotliCompressSync, constants as zlib, gzipSync } from "node:zlib";
import { createHash } from "node:crypto";
import type { Encoding } from "./negotiate.ts";

/** One encoded body and the fields that describe it. */
export interface Variant {
  /** The bytes sent. */
  body: Uint8Array<ArrayBuffer>;
  /** Strong ETag of these bytes, quoted. */
  etag: string;
  /** Header fields of a 200 (and of HEAD): type, coding, validators, caching, plus the representation's own. */
  headers: ReadonlyArray<readonly [string, string]>;
  /** Header fields of a 304: validators, caching, Vary, plus the representation's own. */
  notModifiedHeaders: ReadonlyArray<readonly [string, string]>;
}

/** A representation in every coding the service sends. */
export interface Representation {
  /** The media type with parameters, as in `Content-Type`. */
  type: string;
  /** The variant per coding; a coding that does not make the body smaller shares the identity variant. */
  variants: Readonly<Record<Encoding, Variant>>;
}

/** Options of {@linkcode buildRepresentation}. */
export interface RepresentationOptions {
  /** Header fields sent with every response of this representation (Link, CSP, Vary...). */
  headers?: ReadonlyArray<readonly [string, string]>;
  /** `Cache-Control` (default `no-cache`: store, but revalidate, since rate-limit fields change per request). */
  cacheControl?: string;
}

const ENCODER = new TextEncoder();

/**
 * Builds a representation: identity, gzip and br bodies, their ETags and header fields.
 *
 * The identity variant is built at once; gzip and br are compressed the first time they are asked
 * for (`variants.br` is a getter that compresses once and then keeps the variant): compressing every
 * representation at start-up would delay the first response by hundreds of milliseconds (README,
 * "Cold start"). Reading a variant is therefore never cheaper than the first time it was read; callers
 * on the hot path keep the result.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const json = buildRepresentation("application/json", '{"a":1}');
 * // 7 bytes do not compress: the gzip variant is the identity one.
 * assert.equal(json.variants.gzip.etag, json.variants.identity.etag);
 * ```
 */
export function buildRepresentation(
  type: string,
  body: string | Uint8Array,
  options: RepresentationOptions = {},
): Representation {
  const identityBytes: Uint8Array<ArrayBuffer> = typeof body === "string"
    ? ENCODER.encode(body)
    : new Uint8Array(body);
  const extra = options.headers ?? [];
  const cacheControl = options.cacheControl ?? "no-cache";
  const variantOf = (bytes: Uint8Array<ArrayBuffer>, encoding: Encoding): Variant => {
    const etag = `"${createHash("sha256").update(bytes).digest("base64url").slice(0, 27)}"`;
    const common: Array<readonly [string, string]> = [
      ["etag", etag],
      ["cache-control", cacheControl],
      ...extra,
    ];
    return {
      body: bytes,
      etag,
      headers: [
        ["content-type", type],
        ...(encoding === "identity" ? [] : [["content-encoding", encoding] as const]),
        ...common,
      ],
      notModifiedHeaders: common,
    };
  };
  const identity = variantOf(identityBytes, "identity");
  // A coding that does not make the body smaller shares the identity variant.
  const coded = (encoding: "br" | "gzip"): Variant => {
    const encoded = new Uint8Array(compress(identityBytes, encoding));
    return encoded.length < identityBytes.length ? variantOf(encoded, encoding) : identity;
  };
  let br: Variant | undefined;
  let gzip: Variant | undefined;
  const variants: Record<Encoding, Variant> = {
    identity,
    get br() {
      return br ??= coded("br");
    },
    get gzip() {
      return gzip ??= coded("gzip");
    },
  };
  return { type, variants };
}

/** Compresses `bytes` with the service's settings: gzip 9, brotli 11 in text mode. */
function compress(bytes: Uint8Array, encoding: "br" | "gzip"): Uint8Array {
  if (encoding === "gzip") return gzipSync(bytes, { level: 9 });
  return brotliCompressSync(bytes, {
    params: {
      [zlib.BROTLI_PARAM_QUALITY]: zlib.BROTLI_MAX_QUALITY,
      [zlib.BROTLI_PARAM_SIZE_HINT]: bytes.length,
      [zlib.BROTLI_PARAM_MODE]: zlib.BROTLI_MODE_TEXT,
    },
  });
}
