/**
 * Representations built once at start-up: a body in every content coding, each with its ETag and the
 * header fields that never change between requests.
 *
 * Every 200 body of the service is known when it starts, so compression and hashing happen here,
 * never on the hot path: the identity body and its ETag (SHA-256 from Web Crypto, asynchronous) when
 * the representation is built, each compressed body the first time it is read after `node:zlib` has
 * loaded ({@linkcode loadCompression}, which the warm-up calls after the service listens). No `node:`
 * module is imported statically: Node compatibility would delay the first response (README, "Cold
 * start").
 *
 * @module
 */

import type { Encoding } from "./negotiate.ts";

/** `node:zlib`, once {@linkcode loadCompression} has imported it. */
let zlib: typeof import("node:zlib") | undefined;
let zlibLoading: Promise<void> | undefined;

/**
 * Imports `node:zlib` (once): until it resolves, no representation has a br or gzip variant and
 * requests that ask for one get the identity variant.
 */
export function loadCompression(): Promise<void> {
  return zlibLoading ??= import("node:zlib").then((module) => {
    zlib = module;
  });
}

/** Whether {@linkcode loadCompression} has resolved. */
export function compressionLoaded(): boolean {
  return zlib !== undefined;
}

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
  /**
   * The variant per coding: identity always; br and gzip `undefined` until `node:zlib` has loaded
   * ({@linkcode loadCompression}), then compressed on first read and kept. A coding that does not
   * make the body smaller shares the identity variant.
   */
  variants: Readonly<Record<Exclude<Encoding, "identity">, Variant | undefined>> & {
    readonly identity: Variant;
  };
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
 * The identity variant is built at once (its ETag is a SHA-256 digest of the bytes, hence the
 * promise); gzip and br are compressed the first time they are read once `node:zlib` has loaded
 * (`variants.br` is a getter that compresses once and then keeps the variant): compressing every
 * representation at start-up would delay the first response by hundreds of milliseconds (README,
 * "Cold start"). A compressed variant's ETag is the identity ETag with the coding appended: its bytes
 * are a function of the identity bytes (fixed settings below), so it changes with them. Reading a
 * variant is never cheaper than the first time it was read; callers on the hot path keep the result.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * await loadCompression();
 * const json = await buildRepresentation("application/json", '{"a":1}');
 * // 7 bytes do not compress: the gzip variant is the identity one.
 * assert.equal(json.variants.gzip?.etag, json.variants.identity.etag);
 * ```
 */
export async function buildRepresentation(
  type: string,
  body: string | Uint8Array,
  options: RepresentationOptions = {},
): Promise<Representation> {
  const identityBytes: Uint8Array<ArrayBuffer> = typeof body === "string"
    ? ENCODER.encode(body)
    : new Uint8Array(body);
  const extra = options.headers ?? [];
  const cacheControl = options.cacheControl ?? "no-cache";
  const identityTag = await digest(identityBytes);
  const variantOf = (bytes: Uint8Array<ArrayBuffer>, encoding: Encoding): Variant => {
    const etag = encoding === "identity" ? `"${identityTag}"` : `"${identityTag}-${encoding}"`;
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
  const coded = (codec: typeof import("node:zlib"), encoding: "br" | "gzip"): Variant => {
    const encoded = new Uint8Array(compress(codec, identityBytes, encoding));
    return encoded.length < identityBytes.length ? variantOf(encoded, encoding) : identity;
  };
  let br: Variant | undefined;
  let gzip: Variant | undefined;
  const variants: Representation["variants"] = {
    identity,
    get br() {
      return br ??= zlib && coded(zlib, "br");
    },
    get gzip() {
      return gzip ??= zlib && coded(zlib, "gzip");
    },
  };
  return { type, variants };
}

/** The SHA-256 digest of `bytes` (Web Crypto), in base64url without padding. */
async function digest(bytes: Uint8Array<ArrayBuffer>): Promise<string> {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  // Not btoa: Deno loads it (with atob) on first use, which the first response would wait for.
  return hash.toBase64({ alphabet: "base64url", omitPadding: true });
}

/** Brotli's smallest and largest window, in bits (RFC 7932 section 9.1). */
const BROTLI_MIN_WINDOW_BITS = 10;
const BROTLI_MAX_WINDOW_BITS = 24;

/**
 * The smallest brotli window that holds `length` bytes (a window of w bits holds 2^w - 16): the
 * encoder's default of 22 bits (4 MiB) allocates far more than a body of the service's needs, and a
 * larger window than the body finds no more matches.
 */
export function brotliWindowBits(length: number): number {
  const bits = Math.ceil(Math.log2(length + 16));
  return Math.min(BROTLI_MAX_WINDOW_BITS, Math.max(BROTLI_MIN_WINDOW_BITS, bits));
}

/**
 * Compresses `bytes` with the service's settings: gzip 9, brotli 11 in text mode with a window sized
 * to the body ({@linkcode brotliWindowBits}).
 */
function compress(
  codec: typeof import("node:zlib"),
  bytes: Uint8Array,
  encoding: "br" | "gzip",
): Uint8Array {
  if (encoding === "gzip") return codec.gzipSync(bytes, { level: 9 });
  const { constants } = codec;
  return codec.brotliCompressSync(bytes, {
    params: {
      [constants.BROTLI_PARAM_QUALITY]: constants.BROTLI_MAX_QUALITY,
      [constants.BROTLI_PARAM_LGWIN]: brotliWindowBits(bytes.length),
      [constants.BROTLI_PARAM_SIZE_HINT]: bytes.length,
      [constants.BROTLI_PARAM_MODE]: constants.BROTLI_MODE_TEXT,
    },
  });
}
