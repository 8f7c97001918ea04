/**
 * Prebuilt responses per rate-limit state, cloned per request.
 *
 * Building a `Response` with fifteen header fields costs more in Deno than everything else the
 * service does for a request, and cloning a prebuilt one is the cheapest way to answer with a
 * constant status, body and field set. Only the rate-limit fields change between requests, and they
 * take few values (a caller's first request always sees the same ones), so the handler answers from
 * a bounded cache keyed by the response's template and the decision's remaining, reset and allowed.
 * A response is kept the second time its key is seen, not the first, and only while a budget of keeps
 * allows (maxEntries at first, then one more per {@linkcode KEEP_EVERY} responses): a caller hammering
 * the service under a high limit sees its `remaining` drift through new values, and keeping them
 * churned the cache and grew V8's heap for nothing. A response not kept is a clone of the template's
 * admitted response with the changing fields set, never built from scratch. The keys seen once are
 * remembered in a fixed typed array, which allocates nothing per request. The cache starts again when
 * full, so that callers cannot grow memory without limit.
 *
 * @module
 */

import {
  type Decision,
  type RateLimitConstants,
  rateLimitFields,
  rateLimitValue,
} from "../limit/core/decision.ts";
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
  /**
   * Whether responses are kept and cloned across requests (default true). Workers refuse it: a
   * `Response` belongs to the request that made it, and a clone of it made in another request
   * fails with "Cannot perform I/O on behalf of a different request" (its 500 page too). There
   * every request gets a `Response` built afresh from the template, which holds only strings, bytes
   * and field lists. In Deno the kept clone is the cheapest answer (this module's comment).
   */
  keep?: boolean;
}

/** Counters of a response cache, for tests and benchmarks. */
export interface ResponseCacheStats {
  /** Responses kept now. */
  entries: number;
  /** Responses kept since the cache was created (each is dropped when the cache starts again). */
  kept: number;
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

/** Slots of the table of keys seen once, per response the cache may keep. */
const SEEN_PER_ENTRY = 4;

/**
 * Responses answered per keep regained once the keep budget (maxEntries) is spent. Many callers
 * share a few hundred keys, kept once; a hot caller under a high limit sees its `remaining` drift
 * through new values, and keeping each on its second sight kept and soon dropped thousands of
 * responses a second: V8, seeing them survive its scavenges, grew its young generation and old
 * space, and the process's peak RSS rose by about 50 MiB (tests/bench/README.md, "The hot caller
 * and memory").
 */
const KEEP_EVERY = 256;

/** Keeps allowed at once before the budget must be regained: enough for many callers' common keys. */
const KEEP_BURST = 512;

/** 2^32: a key's low and high 32 bits are its remainder and quotient by this. */
const UINT32_SPAN = 2 ** 32;
/** 2^32 divided by the golden ratio (Fibonacci hashing): the product's top bits spread the keys. */
const FIBONACCI_MULTIPLIER = 0x9e37_79b1;
/** An odd constant from MurmurHash3's finaliser, to mix the key's high bits into its low ones. */
const MIX_MULTIPLIER = 0x85eb_ca6b;

/** Most slots of the table of keys seen once: 2^24 (128 MiB), whatever maxEntries says. */
const MAX_SEEN_BITS = 24;

/** Templates numbered for the table of keys seen once: a key times this plus the number is exact. */
const TEMPLATE_SPAN = 2 ** 14;

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

/** What the cache holds for one template, found with one look-up per request. */
interface TemplateState {
  /** The template's number in the table of keys seen once (below {@linkcode TEMPLATE_SPAN}). */
  readonly id: number;
  /** Kept responses by key. */
  kept: Map<number, Response>;
  /** A response to an admitted request, cloned and re-valued for keys seen once. */
  admittedBase: Response | undefined;
  /** The reset value `admittedBase` carries. */
  baseReset: number;
}

/** The state of one response cache: what is kept, what was seen once, and the counters. */
class BoundedResponseCache implements ResponseCache {
  readonly #constants: RateLimitConstants;
  readonly #maxEntries: number;
  readonly #states = new Map<ResponseTemplate, TemplateState>();
  /** The template answered last and its state (see {@linkcode BoundedResponseCache.#stateOf}). */
  #lastTemplate: ResponseTemplate | undefined;
  #lastState: TemplateState | undefined;
  // Keys seen once, direct-mapped: slot = hash of (key, template), holding key x TEMPLATE_SPAN +
  // template + 1 (0: empty). A fixed typed array: remembering a key allocates nothing, so a hot
  // caller's stream of new keys leaves no garbage for V8 to scavenge or promote. A key displaced by
  // another before its second sight is only built once more.
  readonly #seen: Float64Array;
  /** 32 minus the table's bits: a slot is the top bits of a multiplicative hash. */
  readonly #seenShift: number;
  #entries = 0;
  #kept = 0;
  // Keeps allowed now: starts at KEEP_BURST, regains one per KEEP_EVERY responses, up to maxEntries.
  #keepBudget: number;
  #answered = 0;
  #seenCount = 0;
  #hits = 0;
  #misses = 0;

  constructor(constants: RateLimitConstants, maxEntries: number) {
    this.#constants = constants;
    this.#maxEntries = maxEntries;
    this.#keepBudget = Math.min(maxEntries, KEEP_BURST);
    const bits = Math.min(
      MAX_SEEN_BITS,
      Math.floor(Math.log2(Math.max(2, maxEntries * SEEN_PER_ENTRY))),
    );
    this.#seen = new Float64Array(2 ** bits);
    this.#seenShift = 32 - bits;
  }

  respond(template: ResponseTemplate, decision: Decision): Response {
    const key = keyOf(decision);
    const state = key === undefined ? undefined : this.#stateOf(template);
    if (key === undefined || state === undefined) {
      this.#misses++;
      return buildResponse(template, decision, this.#constants);
    }
    if (++this.#answered % KEEP_EVERY === 0 && this.#keepBudget < this.#maxEntries) {
      this.#keepBudget++;
    }
    const cached = state.kept.get(key);
    if (cached !== undefined) {
      this.#hits++;
      return cached.clone();
    }
    this.#misses++;
    const response = this.#derived(template, state, decision);
    if (this.#firstSeen(state.id, key) || this.#keepBudget === 0) return response;
    this.#keepBudget--;
    // Seen twice: kept. Derived like a first sight, not built: building fifteen fields allocates
    // enough (validation, byte-string conversions) to grow V8's young generation under a hot caller.
    this.#keep(state, key, response);
    return response.clone();
  }

  stats(): ResponseCacheStats {
    return {
      entries: this.#entries,
      kept: this.#kept,
      hits: this.#hits,
      misses: this.#misses,
      seen: this.#seenCount,
    };
  }

  /** The state of `template`, created on its first request; `undefined` past TEMPLATE_SPAN templates. */
  #stateOf(template: ResponseTemplate): TemplateState | undefined {
    // Most requests in a row are answered by one template: one comparison instead of a look-up.
    // With the caller key's last peer, worth 6% to the hot caller, paired (tests/bench/README.md,
    // "Tried and not kept"); neither alone is told apart from noise.
    if (template === this.#lastTemplate) return this.#lastState;
    let state = this.#states.get(template);
    if (state === undefined && this.#states.size < TEMPLATE_SPAN) {
      state = { id: this.#states.size, kept: new Map(), admittedBase: undefined, baseReset: -1 };
      this.#states.set(template, state);
    }
    if (state !== undefined) {
      this.#lastTemplate = template;
      this.#lastState = state;
    }
    return state;
  }

  /** Whether `key` of template `id` is seen for the first time (not in its slot); remembers it if so. */
  #firstSeen(id: number, key: number): boolean {
    const mark = key * TEMPLATE_SPAN + id + 1;
    // Fibonacci hashing of the key's low and high 32 bits and the template's number (the top bits
    // of the product depend on every bit; 2^38 x 2^14 < 2^53 keeps the mark exact).
    const low = key % UINT32_SPAN;
    const high = (key - low) / UINT32_SPAN;
    const mixed = low ^ Math.imul(high * TEMPLATE_SPAN + id, MIX_MULTIPLIER);
    const slot = Math.imul(mixed, FIBONACCI_MULTIPLIER) >>> this.#seenShift;
    const held = this.#seen[slot]!;
    if (held === mark) return false;
    if (held === 0) this.#seenCount++;
    this.#seen[slot] = mark;
    return true;
  }

  /** Keeps `response` under `key` of the template of `state`, starting again when full. */
  #keep(state: TemplateState, key: number, response: Response): void {
    if (this.#entries >= this.#maxEntries) {
      for (const other of this.#states.values()) other.kept = new Map();
      this.#entries = 0;
    }
    state.kept.set(key, response);
    this.#entries++;
    this.#kept++;
  }

  /**
   * A response for a key not kept: a clone of the template's admitted base with the decision's
   * rate-limit values set in place (the fields keep their order), which costs less than building
   * fifteen fields; built outright for a refusal or the template's first admitted request. Only the
   * fields that differ between admitted decisions are set: policy and limit never do, and the reset
   * only when it differs from the base's (a hot caller's reset rarely changes between requests).
   */
  #derived(template: ResponseTemplate, state: TemplateState, decision: Decision): Response {
    const base = decision.allowed ? state.admittedBase : undefined;
    if (base === undefined) {
      const response = buildResponse(template, decision, this.#constants);
      if (!decision.allowed) return response;
      state.admittedBase = response;
      state.baseReset = decision.resetSeconds;
      return response.clone();
    }
    const response = base.clone();
    const headers = response.headers;
    const remaining = String(decision.remaining);
    const reset = String(decision.resetSeconds);
    headers.set("ratelimit", rateLimitValue(remaining, reset));
    headers.set("ratelimit-remaining", remaining);
    if (decision.resetSeconds !== state.baseReset) headers.set("ratelimit-reset", reset);
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
 * assert.deepEqual(cache.stats(), { entries: 1, kept: 1, hits: 1, misses: 2, seen: 1 });
 * ```
 */
export function createResponseCache(
  constants: RateLimitConstants,
  options: ResponseCacheOptions = {},
): ResponseCache {
  if (options.keep === false) return freshResponses(constants);
  return new BoundedResponseCache(constants, options.maxEntries ?? DEFAULT_MAX_ENTRIES);
}

/** A "cache" that keeps nothing: each request's `Response` is built from the template. */
function freshResponses(constants: RateLimitConstants): ResponseCache {
  let misses = 0;
  return {
    respond(template, decision) {
      misses++;
      return buildResponse(template, decision, constants);
    },
    stats: () => ({ entries: 0, kept: 0, hits: 0, misses, seen: 0 }),
  };
}
