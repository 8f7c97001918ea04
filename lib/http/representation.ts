/**
 * Representations built once at start-up: a body in every content coding, each with its ETag and the
 * header fields that never change between requests.
 *
 * Every 200 body of the service is known when it starts, so compression and hashing happen here,
 * never on the hot path: the identity body and its ETag (SHA-256 from Web Crypto, asynchronous) when
 * the representation is built, the compressed bodies (the web's `CompressionStream`, asynchronous)
 * once compression is enabled ({@linkcode enableCompression}, which the warm-up calls after the
 * service listens). No `node:` module is imported, statically or dynamically: Node compatibility
 * would delay the first response (lib/README.md, "Cold start") and add to the process's resident
 * memory (tests/bench/README.md, "The hot caller and memory").
 *
 * @module
 */

import type { Encoding } from "./negotiate.ts";
import { toBase64 } from "../text/base64.ts";

let compressionOn = false;

/** Compresses a body in one content coding. */
export type Compressor = (
  bytes: Uint8Array<ArrayBuffer>,
  encoding: "br" | "gzip",
) => Promise<Uint8Array<ArrayBuffer>>;

let compressor: Compressor = compressBytes;

/**
 * Compresses the representations built from now on with `compress` rather than the runtime's
 * `CompressionStream` ({@linkcode compressBytes}): Node's entry gives `node:zlib` with Deno's
 * settings (lib/node/compress.ts), where Node's own stream compresses br at another quality.
 */
export function useCompressor(compress: Compressor): void {
  compressor = compress;
}

/**
 * Enables compression: representations built from now on are built with their br and gzip variants,
 * and those built before get theirs on first read, in the background ({@linkcode compressVariants}
 * builds them at once). Until then requests that ask for a coding get the identity variant.
 */
export function enableCompression(): void {
  compressionOn = true;
}

/** Whether {@linkcode enableCompression} has been called. */
export function compressionEnabled(): boolean {
  return compressionOn;
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
   * The variant per coding: identity always; br and gzip `undefined` until they are compressed
   * ({@linkcode Representation.compress}), then kept. A coding that does not make the body smaller
   * shares the identity variant.
   */
  variants: Readonly<Record<Exclude<Encoding, "identity">, Variant | undefined>> & {
    readonly identity: Variant;
  };
  /**
   * Compresses the br and gzip variants, once (later calls return the same promise); the warm-up
   * awaits it. Reading `variants.br` or `variants.gzip` once compression is enabled starts it too.
   */
  compress(): Promise<void>;
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
 * promise). Once compression is enabled ({@linkcode enableCompression}) the br and gzip variants are
 * compressed before the promise resolves; a representation built before that gets them from
 * `compress()`, which the warm-up awaits, or in the background from the first read of
 * `variants.br` or `variants.gzip` (that read still gets `undefined`): compressing at start-up would
 * delay the first response (lib/README.md, "Cold start"). Each variant's ETag names its own bytes:
 * the SHA-256 of the bytes it sends, a compressed one's with its coding appended. Compressors differ
 * (Deno's and Node's give other bytes for one body), so one tag never names two bodies, across
 * runtimes and upgrades.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * enableCompression();
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
  const variantOf = variantBuilder(type, options);
  const identity = variantOf(identityBytes, await digest(identityBytes), "identity");
  // A coding that does not make the body smaller shares the identity variant; so does one the
  // runtime cannot produce (Workers' CompressionStream has no brotli), each coding on its own: a
  // missing br never keeps gzip from being built.
  const coded = async (encoding: "br" | "gzip"): Promise<Variant> => {
    const encoded = await compressor(identityBytes, encoding).catch(() => undefined);
    return encoded !== undefined && encoded.length < identityBytes.length
      ? variantOf(encoded, await digest(encoded), encoding)
      : identity;
  };
  let br: Variant | undefined;
  let gzip: Variant | undefined;
  let compressing: Promise<void> | undefined;
  // One coding after the other: each compressor holds megabytes while it runs.
  const compress = () =>
    compressing ??= (async () => {
      br = await coded("br");
      gzip = await coded("gzip");
    })();
  const startIfEnabled = () => {
    if (compressionOn && compressing === undefined) compress().catch(() => compressing = undefined);
  };
  const variants: Representation["variants"] = {
    identity,
    get br() {
      if (br === undefined) startIfEnabled();
      return br;
    },
    get gzip() {
      if (gzip === undefined) startIfEnabled();
      return gzip;
    },
  };
  if (compressionOn) await compress();
  return { type, variants, compress };
}

/**
 * The builder of a representation's variants: each coding's bytes, ETag (from `tag`, the digest of
 * those bytes) and header fields.
 */
function variantBuilder(
  type: string,
  options: RepresentationOptions,
): (bytes: Uint8Array<ArrayBuffer>, tag: string, encoding: Encoding) => Variant {
  const extra = options.headers ?? [];
  const cacheControl = options.cacheControl ?? "no-cache";
  return (bytes, tag, encoding) => {
    const etag = encoding === "identity" ? `"${tag}"` : `"${tag}-${encoding}"`;
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
}

/** The SHA-256 digest of `bytes` (Web Crypto), in base64url without padding. */
async function digest(bytes: Uint8Array<ArrayBuffer>): Promise<string> {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  // Natively where the runtime can (not btoa: Deno loads it, with atob, on first use, which the
  // first response would wait for); Node 24 has no `toBase64` (lib/text/base64.ts).
  return toBase64(hash, true);
}

/** `CompressionStream`'s name of each content coding the service sends. */
const STREAM_FORMATS = { br: "brotli", gzip: "gzip" } as const;

/**
 * Compresses `bytes` with the runtime's `CompressionStream` (brotli and gzip, Deno's own settings):
 * no Node compatibility layer to load and keep resident, and no step long enough to hold up the
 * requests that arrive meanwhile (lib/README.md, "Compression and caching").
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const text = new TextEncoder().encode("compress me ".repeat(100));
 * const br = await compressBytes(text, "br");
 * assert.ok(br.length < text.length);
 * ```
 */
export async function compressBytes(
  bytes: Uint8Array<ArrayBuffer>,
  encoding: "br" | "gzip",
): Promise<Uint8Array<ArrayBuffer>> {
  // Deno 2.9 accepts "brotli"; TypeScript's lib knows only the formats every browser has.
  const format = STREAM_FORMATS[encoding] as CompressionFormat;
  const stream = new Blob([bytes]).stream().pipeThrough(new CompressionStream(format));
  return await new Response(stream).bytes();
}
