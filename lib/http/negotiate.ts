/**
 * Content negotiation: which media type and which content coding a request gets.
 *
 * The parsing and ranking (q-values, specificity, order) are `npm:negotiator`'s. This module adds the
 * service's rules: a request whose `Accept` matches nothing gets the path's default representation
 * rather than 406 (RFC 9110 section 12.5.1 allows ignoring the header), and equal preferences for a
 * coding go to br, then gzip. Results are memoised per header value, so a repeated header costs one map
 * look-up.
 *
 * `npm:negotiator` is imported dynamically ({@linkcode loadNegotiator}): loading it (and the Node
 * compatibility it needs) before the first response would double a cold start (lib/README.md,
 * "Cold start"), and keeping it resident costs megabytes in a process that never needs it. The common
 * header values are answered without it, with the same result (a property test compares the two);
 * for any other value the answer is a promise, resolved once negotiator is loaded: the request waits
 * for the import.
 *
 * @module
 */

/** A content coding the service can send. */
export type Encoding = "br" | "gzip" | "identity";

/** The codings in the order the service prefers them when the caller has no preference. */
export const ENCODINGS: readonly Encoding[] = ["br", "gzip", "identity"];

/** Most distinct header values remembered per negotiator; beyond it the memo starts again. */
const MEMO_LIMIT = 1024;

/**
 * The longest `Accept` or `Accept-Encoding` value the service reads; a longer one is treated as
 * absent (lib/README.md, "Negotiation"). Real values are well under it (a browser's `Accept` is
 * about 150 characters); a pathological one could otherwise cost a request a hundred times a plain
 * one in negotiator (issue 31). Every value read is short enough to be remembered, so at most
 * MEMO_LIMIT x 256 characters per memo.
 */
export const MAX_NEGOTIATED_LENGTH = 256;

/**
 * `value`, or `null` (absent) when it is longer than `max`: what every parser of a header value
 * receives, so that no value costs more than one of `max` characters.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(bounded("text/markdown", MAX_NEGOTIATED_LENGTH), "text/markdown");
 * assert.equal(bounded(",".repeat(257), MAX_NEGOTIATED_LENGTH), null);
 * ```
 */
export function bounded(value: string | null, max: number): string | null {
  return value !== null && value.length > max ? null : value;
}

interface NegotiatorInstance {
  mediaTypes(available: string[]): string[];
  encodings(available: string[], options?: { preferred?: string[] }): string[];
}
type NegotiatorClass = new (
  request: { headers: Record<string, string | undefined> },
) => NegotiatorInstance;

/** Negotiator, once {@linkcode loadNegotiator} has loaded it. */
let negotiatorClass: NegotiatorClass | undefined;
let loading: Promise<void> | undefined;

/** An `Accept` value the service answers without negotiator: one media type, no parameters. */
const PLAIN_MEDIA_TYPE = /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+$/;

/** An `Accept-Encoding` value answered without negotiator: codings without weights, `*` excepted. */
const PLAIN_CODINGS = /^\s*[A-Za-z0-9!#$%&'+.^_`|~-]+\s*(,\s*[A-Za-z0-9!#$%&'+.^_`|~-]+\s*)*$/;

/**
 * Loads negotiator (once; later calls return the same promise): the first request whose negotiation
 * needs it waits for it. The warm-up does not load it (`warm_up.ts`). A failed load is not kept: the
 * requests waiting for it fail (500), and the next one that needs negotiator tries again, so that a
 * passing failure (a file system hiccup, memory pressure) does not last until a restart.
 *
 * @param load imports the package (tests pass one that fails)
 */
export function loadNegotiator(
  load: () => Promise<{ default: unknown }> = () => import("negotiator"),
): Promise<void> {
  return loading ??= load().then(
    (module) => {
      negotiatorClass = module.default as NegotiatorClass;
    },
    (error) => {
      loading = undefined;
      throw error;
    },
  );
}

/** Whether {@linkcode loadNegotiator} has resolved (negotiator, and Node compatibility with it, loaded). */
export function negotiatorLoaded(): boolean {
  return negotiatorClass !== undefined;
}

/** Whether {@linkcode preferredType} answers this `Accept` without negotiator. */
export function isCommonAccept(accept: string | null): boolean {
  return accept === null || accept === "" || accept === "*/*" || PLAIN_MEDIA_TYPE.test(accept);
}

/** Whether {@linkcode preferredEncoding} answers this `Accept-Encoding` without negotiator. */
export function isCommonAcceptEncoding(acceptEncoding: string | null): boolean {
  return acceptEncoding === null || acceptEncoding === "" || PLAIN_CODINGS.test(acceptEncoding);
}

/**
 * Picks the media type of `supported` that `accept` prefers; `supported[0]` when `accept` is absent or
 * matches none of them. For a value other than those of {@linkcode isCommonAccept}, a promise until
 * {@linkcode loadNegotiator} has resolved.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * await loadNegotiator();
 * const accept = "text/markdown;q=0.9, application/json;q=0.5";
 * assert.equal(preferredType(accept, ["application/json", "text/markdown"]), "text/markdown");
 * ```
 */
export function preferredType<T extends string>(
  accept: string | null,
  supported: readonly [T, ...T[]],
): T | Promise<T> {
  accept = bounded(accept, MAX_NEGOTIATED_LENGTH);
  if (accept === null || accept === "" || accept === "*/*") return supported[0];
  if (isCommonAccept(accept)) {
    // Negotiator compares types case-insensitively and ignores an offer's parameters here.
    return supported.find((type) => type.split(";")[0]!.trim().toLowerCase() === accept) ??
      supported[0];
  }
  if (negotiatorClass === undefined) {
    const value = accept;
    return loadNegotiator().then(() => preferredType(value, supported));
  }
  const ranked = new negotiatorClass({ headers: { accept: withoutMediaTypeParameters(accept) } })
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
 * For a value other than those of {@linkcode isCommonAcceptEncoding}, a promise until
 * {@linkcode loadNegotiator} has resolved.
 */
export function preferredEncoding(acceptEncoding: string | null): Encoding | Promise<Encoding> {
  acceptEncoding = bounded(acceptEncoding, MAX_NEGOTIATED_LENGTH);
  if (acceptEncoding === null || acceptEncoding === "") return "identity";
  if (isCommonAcceptEncoding(acceptEncoding)) {
    // All at weight 1 (identity too, unless named): the service's order decides.
    const named = new Set(acceptEncoding.split(",").map((coding) => coding.trim().toLowerCase()));
    return named.has("br") ? "br" : named.has("gzip") ? "gzip" : "identity";
  }
  if (negotiatorClass === undefined) {
    const value = acceptEncoding;
    return loadNegotiator().then(() => preferredEncoding(value));
  }
  const ranked = new negotiatorClass({ headers: { "accept-encoding": acceptEncoding } })
    .encodings([...ENCODINGS], { preferred: [...ENCODINGS] });
  return (ranked[0] as Encoding | undefined) ?? "identity";
}

/**
 * Wraps a negotiation function of one header value in a bounded memo. A value longer than
 * {@linkcode MAX_NEGOTIATED_LENGTH} is answered as `null` (absent): `negotiate` never sees it. A
 * promise (negotiator not loaded yet) is returned, not remembered.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * await loadNegotiator();
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
  // The value answered last, checked before the map: nearly every request of a client sends the
  // same value, and comparing it costs less than hashing it for the map (a value read from a
  // request is a new string each time, whose hash V8 has not computed yet). The map is worth 15%
  // when values alternate (tests/bench/README.md, "Tried and not kept").
  let lastValue: string | undefined;
  let lastResult: R | undefined;
  return (value) => {
    // A value over the bound is absent: it reaches no parser, and the memo holds short values only.
    if (value === null || value.length > MAX_NEGOTIATED_LENGTH) {
      return (none ??= { value: negotiate(null) }).value;
    }
    if (value === lastValue) return lastResult!;
    let result = memo.get(value);
    if (result === undefined) {
      result = negotiate(value);
      if (result instanceof Promise) return result;
      // Bounded: arbitrary header values from callers must not grow memory without limit.
      if (memo.size >= MEMO_LIMIT) memo.clear();
      memo.set(value, result);
    }
    lastValue = value;
    lastResult = result;
    return result;
  };
}
