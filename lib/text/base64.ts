/**
 * Base64 of bytes and back, natively where the runtime has `Uint8Array.prototype.toBase64` and
 * `Uint8Array.fromBase64` (Deno, Node 26, Workers), else through `btoa` and `atob` (Node 24, whose V8
 * lacks them: lib/node/). The native path is taken when present, so Deno's first response loads no
 * `btoa`.
 *
 * @module
 */

/** The native encoder's options (TC39 "Uint8Array to/from base64"). */
interface Base64Options {
  alphabet?: "base64" | "base64url";
  omitPadding?: boolean;
}

/** The native methods, where the runtime has them. */
const native = {
  to: (Uint8Array.prototype as unknown as {
    toBase64?: (this: Uint8Array, options?: Base64Options) => string;
  }).toBase64,
  from: (Uint8Array as unknown as {
    fromBase64?: (text: string, options?: Base64Options) => Uint8Array<ArrayBuffer>;
  }).fromBase64,
};

/** Bytes per `String.fromCharCode` call: well below any engine's limit on arguments. */
const STEP = 8190;

/**
 * `bytes` as base64, or base64url without padding when `url` is true.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(toBase64(new Uint8Array([251, 255])), "+/8=");
 * assert.equal(toBase64(new Uint8Array([251, 255]), true), "-_8");
 * ```
 */
export function toBase64(bytes: Uint8Array, url = false): string {
  const options: Base64Options = url ? { alphabet: "base64url", omitPadding: true } : {};
  if (native.to !== undefined) return native.to.call(bytes, options);
  const parts: string[] = [];
  for (let start = 0; start < bytes.length; start += STEP) {
    parts.push(String.fromCharCode(...bytes.subarray(start, start + STEP)));
  }
  const text = btoa(parts.join(""));
  return url ? text.replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "") : text;
}

/**
 * The bytes of base64 `text` (the standard alphabet, padded); throws on a character outside it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(fromBase64("+/8="), new Uint8Array([251, 255]));
 * assert.throws(() => fromBase64("*"));
 * ```
 */
export function fromBase64(text: string): Uint8Array<ArrayBuffer> {
  if (native.from !== undefined) return native.from.call(Uint8Array, text);
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
