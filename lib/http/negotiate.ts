/**
 * Content negotiation: which media type and which content coding a request gets.
 *
 * The parsing and ranking (q-values, specificity, order) are `npm:negotiator`'s. This module adds the
 * service's rules: a request whose `Accept` matches nothing gets the path's default representation
 * rather than 406 (RFC 9110 section 12.5.1 allows ignoring the header), and equal preferences for a
 * coding go to br, then gzip. Results are memoised per header value, so a repeated header costs one map
 * look-up.
 *
 * @module
 */

import Negotiator from "negotiator";

/** A content coding the service can send. */
export type Encoding = "br" | "gzip" | "identity";

/** The codings in the order the service prefers them when the caller has no preference. */
export const ENCODINGS: readonly Encoding[] = ["br", "gzip", "identity"];

/** Most distinct header values remembered per negotiator; beyond it the memo starts again. */
const MEMO_LIMIT = 1024;

/** Longest header value remembered: at most MEMO_LIMIT x 256 characters per memo. */
const MEMO_MAX_LENGTH = 256;

interface NegotiatorInstance {
  mediaTypes(available: string[]): string[];
  encodings(available: string[], options?: { preferred?: string[] }): string[];
}
const NegotiatorClass = Negotiator as unknown as new (
  request: { headers: Record<string, string | undefined> },
) => NegotiatorInstance;

/**
 * Picks the media type of `supported` that `accept` prefers; `supported[0]` when `accept` is absent or
 * matches none of them.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const accept = "text/markdown;q=0.9, application/json;q=0.5";
 * assert.equal(preferredType(accept, ["application/json", "text/markdown"]), "text/markdown");
 * ```
 */
export function preferredType<T extends string>(
  accept: string | null,
  supported: readonly [T, ...T[]],
): T {
  if (accept === null || accept === "") return supported[0];
  const ranked = new NegotiatorClass({ headers: { accept: withoutMediaTypeParameters(accept) } })
    .mediaTypes([...supported]);
  return (ranked[0] as T | undefined) ?? supported[0];
}

/**
 * Drops media-type parameters other than `q` from an `Accept` value. Negotiator matches a range with
 * parameters only against an offer with the same ones, so `text/markdown; charset=utf-8` or
 * `text/markdown; variant=CommonMark` would otherwise miss the one Markdown the service has (UTF-8,
 * GFM) and fall back to the default.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(
 *   withoutMediaTypeParameters("text/markdown; charset=utf-8;q=0.8, application/json;q=0.1"),
 *   "text/markdown;q=0.8,application/json;q=0.1",
 * );
 * ```
 */
export function withoutMediaTypeParameters(accept: string): string {
  return accept.split(",").map((range) => {
    const [type = "", ...parameters] = range.split(";");
    const q = parameters.find((p) => /^\s*q\s*=/i.test(p));
    return q === undefined ? type.trim() : `${type.trim()};${q.trim()}`;
  }).join(",");
}

/**
 * Picks the coding `acceptEncoding` prefers among `ENCODINGS`; identity when the header is absent,
 * or when it refuses every coding including identity (an unencoded body is the safest answer then).
 */
export function preferredEncoding(acceptEncoding: string | null): Encoding {
  if (acceptEncoding === null || acceptEncoding === "") return "identity";
  const ranked = new NegotiatorClass({ headers: { "accept-encoding": acceptEncoding } })
    .encodings([...ENCODINGS], { preferred: [...ENCODINGS] });
  return (ranked[0] as Encoding | undefined) ?? "identity";
}

/**
 * Wraps a negotiation function of one header value in a bounded memo.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * let computed = 0;
 * const forPlatform = memoize((accept) => {
 *   computed++;
 *   return preferredType(accept, ["application/json", "text/markdown"]);
 * });
 * assert.equal(forPlatform("text/markdown"), "text/markdown");
 * assert.equal(forPlatform("text/markdown"), "text/markdown");
 * assert.equal(computed, 1);
 * ```
 */
export function memoize<R>(negotiate: (value: string | null) => R): (value: string | null) => R {
  const memo = new Map<string, R>();
  let none: { value: R } | undefined;
  return (value) => {
    if (value === null) return (none ??= { value: negotiate(null) }).value;
    // Header values can be tens of kilobytes: remembering long ones would let callers fill memory
    // by size rather than by count. Real Accept values are short, so nothing is lost.
    if (value.length > MEMO_MAX_LENGTH) return negotiate(value);
    let result = memo.get(value);
    if (result === undefined) {
      result = negotiate(value);
      // Bounded: arbitrary header values from callers must not grow memory without limit.
      if (memo.size >= MEMO_LIMIT) memo.clear();
      memo.set(value, result);
    }
    return result;
  };
}
