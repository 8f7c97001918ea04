/**
 * The characters no one-line value may hold: the configuration refuses a value with one
 * (`lib/config/`), robots.txt's filling turns each into a space (`lib/pages/content.ts`).
 *
 * @module
 */

/**
 * Control characters (C0, DEL, C1), line and paragraph separators, and the bidirectional controls
 * that make text read other than it is stored (Trojan Source): none belongs in a one-line value.
 * Without the `g` flag, so `test` keeps no state; `new RegExp(CONTROL_CHARACTERS, "g")` to replace.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.ok(CONTROL_CHARACTERS.test("Acme\nInjected"));
 * assert.ok(CONTROL_CHARACTERS.test("abc\u202edcba"));
 * assert.ok(!CONTROL_CHARACTERS.test("Acme [Legal], Inc."));
 * ```
 */
export const CONTROL_CHARACTERS: RegExp =
  // deno-lint-ignore no-control-regex -- control characters are what it finds
  /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/;
