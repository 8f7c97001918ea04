/**
 * Prebuilt responses per rate-limit state, cloned per request.
 *
 * Building a `Response` with fifteen header fields costs more in Deno than everything else the
 * service does for a request, and cloning a prebuilt one is the cheapest way to answer with a
 * constant status, body and field set. Only the rate-limit fields change between requests, and they
 * take few values (a caller's first request always sees the same ones), so the handler answers from
 * a bounded cache keyed by the response's template and the decision's remaining, reset and allowed.
 * A response is kept the second time its key is seen, not the first: a caller hammering the service
 * under a high limit sees a new `remaining` with every request, and keeping each of those responses
 * built and cloned every one of them and churned the cache (and its bodies) for nothing; a key seen
 * once is only remembered, as a number. The cache starts again when full, so that callers cannot grow
 * memory without limit.
 *
 * @module
 */

import { type Decision, type RateLimitConstants, rateLimitFields } from "../limit/decision.ts";
import type { HeaderField } from "../http/message.ts";

/** A response without its rate-limit fields: status, body and the fields that never change. */
export interface ResponseTemplate {
  /** HTTP status. */
  readonly status: number;
  /**
   * The body, or `null` (HEAD, 204, 304). Text is best given as a string: Deno clones and sends a
   * string body faster than the same bytes (see {@linkcode sendableBody}).
   */
  readonly body: Uint8Array<ArrayBuffer> | string | null;
  /** The fields, in the order they are sent, before the rate-limit fields. */
  readonly fields: readonly HeaderField[];
}

/** Options of {@linkcode createResponseCache}. */
export interface ResponseCacheOptions {
  /** Most responses kept at once, over every template (default 4096). */
  maxEntries?: number;
}

/** Counters of a response cache, for tests and benchmarks. */
export interface ResponseCacheStats {
  /** Responses kept now. */
  entries: number;
  /** Requests answered from a kept response. */
  hits: number;
  /** Requests that built their response. */
  misses: number;
  /** Keys seen once and not (yet) kept. */
  seen: number;
}

/** A cache of prebuilt responses: `respond` answers a template with a decision's fields. */
export interface ResponseCache {
  /** A fresh `Response` of `template` carrying the rate-limit fields of `decision`. */
  respond(template: ResponseTemplate, decision: Decision): Response;
  /** The number of kept responses, hits and misses. */
  stats(): ResponseCacheStats;
}

const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * The body to keep in a template: the text of an unencoded UTF-8 body (Deno's `clone()` copies a
 * byte body through a structured clone and sends a string body by a faster op; the bytes on the wire
 * are the same), otherwise the bytes as they are.
 *
 * @param encoded whether the body has a content coding (gzip, br): then it is never text
 */
export function sendableBody(
  body: Uint8Array<ArrayBuffer>,
  encoded: boolean,
): Uint8Array<ArrayBuffer> | string {
  if (encoded) return body;
  try {
    const text = STRICT_UTF8.decode(body);
    // Only if encoding the text gives back these very bytes.
    return new TextEncoder().encode(text).length === body.length ? text : body;
  } catch {
    return body;
  }
}

/**
 * Builds the response of `template` with the fields of `decision` (none when `undefined`), without
 * any cache: the reference that cached responses must equal.
 */
export function buildResponse(
  template: ResponseTemplate,
  decision: Decision | undefined,
  constants: RateLimitConstants,
): Response {
  const fields = decision
    ? [...template.fields, ...rateLimitFields(decision, constants)]
    : template.fields;
  return new Response(template.body, {
    status: template.status,
    headers: fields as [string, string][],
  });
}

/** Remaining values up to 1,000,000 (the largest RATE_LIMIT) are below 2^20. */
const REMAINING_SPAN = 2 ** 20;
/** Reset values up to 86,400 (the longest window) are below 2^17. */
const RESET_SPAN = 2 ** 17;

/** Keys remembered as seen once, per response the cache may keep, before they start again. */
const SEEN_PER_ENTRY = 4;

function keyable(value: number, span: number): boolean {
  return Number.isInteger(value) && value >= 0 && value < span;
}

/**
 * The key of a decision's rate-limit values, or `undefined` outside the key's exact range.
 * Collision-free: every (remaining, reset, allowed) in range has its own number below 2^38.
 */
function keyOf(decision: Decision): number | undefined {
  const { remaining, resetSeconds } = decision;
  if (!(keyable(remaining, REMAINING_SPAN) && keyable(resetSeconds, RESET_SPAN))) return undefined;
  return (remaining * RESET_SPAN + resetSeconds) * 2 + (decision.allowed ? 1 : 0);
}

/** The state of one response cache: what is kept, what was seen once, and the counters. */
class BoundedResponseCache implements ResponseCache {
  readonly #constants: RateLimitConstants;
  readonly #maxEntries: number;
  // One map per template, found by identity; each maps a number made of the decision's values.
  #byTemplate = new Map<ResponseTemplate, Map<number, Response>>();
  // The keys seen once, per template: kept on the second sight.
  #seenBy = new Map<ResponseTemplate, Set<number>>();
  // Per template, a response to an admitted request, cloned and re-valued for keys seen once.
  readonly #admittedBase = new Map<ResponseTemplate, Response>();
  #entries = 0;
  #seenCount = 0;
  #hits = 0;
  #misses = 0;

  constructor(constants: RateLimitConstants, maxEntries: number) {
    this.#constants = constants;
    this.#maxEntries = maxEntries;
  }

  respond(template: ResponseTemplate, decision: Decision): Response {
    const key = keyOf(decision);
    if (key === undefined) {
      this.#misses++;
      return buildResponse(template, decision, this.#constants);
    }
    const cached = this.#byTemplate.get(template)?.get(key);
    if (cached !== undefined) {
      this.#hits++;
      return cached.clone();
    }
    this.#misses++;
    if (this.#firstSeen(template, key)) return this.#firstSight(template, decision); // nothing kept
    const response = buildResponse(template, decision, this.#constants);
    this.#keep(template, key, response);
    return response.clone();
  }

  stats(): ResponseCacheStats {
    return {
      entries: this.#entries,
      hits: this.#hits,
      misses: this.#misses,
      seen: this.#seenCount,
    };
  }

  /** Whether `key` of `template` is seen for the first time; remembers it if so. */
  #firstSeen(template: ResponseTemplate, key: number): boolean {
    let seen = this.#seenBy.get(template);
    if (seen?.has(key) === true) return false;
    if (this.#seenCount >= this.#maxEntries * SEEN_PER_ENTRY) {
      this.#seenBy = new Map();
      this.#seenCount = 0;
      seen = undefined;
    }
    if (seen === undefined) {
      seen = new Set();
      this.#seenBy.set(template, seen);
    }
    seen.add(key);
    this.#seenCount++;
    return true;
  }

  /** Keeps `response` under `key` of `template`, starting again when full. */
  #keep(template: ResponseTemplate, key: number, response: Response): void {
    if (this.#entries >= this.#maxEntries) {
      this.#byTemplate = new Map();
      this.#entries = 0;
    }
    let kept = this.#byTemplate.get(template);
    if (kept === undefined) {
      kept = new Map();
      this.#byTemplate.set(template, kept);
    }
    kept.set(key, response);
    this.#entries++;
  }

  /**
   * A response for a key seen once: a clone of the template's admitted base with the decision's
   * rate-limit values set in place (the fields keep their order), which costs less than building
   * fifteen fields; built outright for a refusal or the template's first admitted request.
   */
  #firstSight(template: ResponseTemplate, decision: Decision): Response {
    const base = decision.allowed ? this.#admittedBase.get(template) : undefined;
    if (base === undefined) {
      const response = buildResponse(template, decision, this.#constants);
      if (!decision.allowed) return response;
      this.#admittedBase.set(template, response);
      return response.clone();
    }
    // Only the fields that differ between admitted decisions (policy and limit never do).
    const response = base.clone();
    const headers = response.headers;
    const remaining = String(decision.remaining);
    const reset = String(decision.resetSeconds);
    headers.set("ratelimit", `"default";r=${remaining};t=${reset}`);
    headers.set("ratelimit-remaining", remaining);
    headers.set("ratelimit-reset", reset);
    return response;
  }
}

/** Most responses a cache keeps at once unless told otherwise. */
const DEFAULT_MAX_ENTRIES = 4096;

/**
 * Creates a bounded cache of prebuilt responses.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const cache = createResponseCache({ policy: '"default";q=60;w=60', limit: "60" });
 * const template = { status: 200, body: "{}", fields: [["content-type", "application/json"]] } as const;
 * const decision = { allowed: true, remaining: 59, resetSeconds: 60 };
 * cache.respond(template, decision); // seen once: built, not kept
 * cache.respond(template, decision); // seen twice: built, kept, cloned
 * const response = cache.respond(template, decision); // cloned
 * assert.equal(response.headers.get("ratelimit-remaining"), "59");
 * assert.equal(await response.text(), "{}");
 * assert.deepEqual(cache.stats(), { entries: 1, hits: 1, misses: 2, seen: 1 });
 * ```
 */
export function createResponseCache(
  constants: RateLimitConstants,
  options: ResponseCacheOptions = {},
): ResponseCache {
  return new BoundedResponseCache(constants, options.maxEntries ?? DEFAULT_MAX_ENTRIES);
}
