/**
 * Representations built once at start-up: a body in every content coding, each with its ETag and the
 * header fields that never change between requests.
 *
 * Every 200 body of the service is known when it starts, so compression and hashing happen here,
 * never on the hot path.
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
 * @example
 * ```ts
 * const json = buildRepresentation("application/json", '{"a":1}');
 * json.variants.gzip.etag; // the identity ETag too: 7 bytes do not compress
 * ```
 */
export function buildRepresentation(
  type: string,
  body: string | Uint8Array,
  options: RepresentationOptions = {},
): Representation {
  const identity: Uint8Array<ArrayBuffer> = typeof body === "string"
    ? ENCODER.encode(body)
    : new Uint8Array(body);
  const encoded: Record<Encoding, Uint8Array> = {
    identity,
    gzip: gzipSync(identity, { level: 9 }),
    br: brotliCompressSync(identity, {
      params: {
        [zlib.BROTLI_PARAM_QUALITY]: zlib.BROTLI_MAX_QUALITY,
        [zlib.BROTLI_PARAM_SIZE_HINT]: identity.length,
        [zlib.BROTLI_PARAM_MODE]: zlib.BROTLI_MODE_TEXT,
      },
    }),
  };
  const extra = options.headers ?? [];
  const cacheControl = options.cacheControl ?? "no-cache";
  const variants = {} as Record<Encoding, Variant>;
  // Identity first, so that a coding which does not make the body smaller can share its variant.
  for (const encoding of ["identity", "br", "gzip"] as const) {
    const useEncoding = encoding !== "identity" && encoded[encoding].length < identity.length;
    if (encoding !== "identity" && !useEncoding) {
      variants[encoding] = variants.identity;
      continue;
    }
    const bytes = useEncoding ? new Uint8Array(encoded[encoding]) : identity;
    const etag = `"${createHash("sha256").update(bytes).digest("base64url").slice(0, 27)}"`;
    const common: Array<readonly [string, string]> = [["etag", etag], [
      "cache-control",
      cacheControl,
    ], ...extra];
    variants[encoding] = {
      body: bytes,
      etag,
      headers: [
        ["content-type", type],
        ...(useEncoding ? [["content-encoding", encoding] as const] : []),
        ...common,
      ],
      notModifiedHeaders: common,
    };
  }
  return { type, variants };
}
