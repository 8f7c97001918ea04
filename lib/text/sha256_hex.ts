/**
 * `sha256Hex`: the SHA-256 digest of bytes in lowercase hex, the form of the build's freshness
 * stamp and of the prerendered pages' source digests.
 *
 * @module
 */

/**
 * The SHA-256 digest of `bytes` (Web Crypto) as 64 lowercase hex digits.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(
 *   await sha256Hex(new TextEncoder().encode("abc")),
 *   "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
 * );
 * ```
 */
export async function sha256Hex(bytes: Uint8Array<ArrayBuffer>): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (byte) => byte.toString(16).padStart(2, "0")).join("");
}
