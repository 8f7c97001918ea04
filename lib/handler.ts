/**
 * The fetch handler: caller key -> rate-limit decision -> path -> answer -> response.
 *
 * This module is that composition and nothing else. At start-up (`setUp`) it builds the paths'
 * answers (`respond/paths.ts`, each built when first needed) and the response cache, and schedules
 * the warm-up (`warm_up.ts`, imported when it starts); per request it takes the caller's key
 * (`limit/caller/caller_key.ts`), the limiter's decision (the store's `hit`, or its `peek` for a CORS
 * preflight, `preflightDecision`), the path's answers, the one that answers (`respond/answers.ts`,
 * a promise while it is being built): the request's {@linkcode Answer} (`respond/wire.ts`), which
 * the `fetch` handler turns into a prebuilt response for that decision
 * (`respond/response_cache.ts`) and Node's entry writes as it is (`answer`, `wire`). Unexpected
 * failures are caught here, once, reported and answered 500 with the Error shape.
 *
 * @module
 */

import { type AccessRecord, type AccessRecorder, createAccessRecorder } from "./access_log.ts";
import type { Config } from "./config/config.ts";
import { isCorsPreflight, isValidHost, requestPathOf } from "./http/message.ts";
import { createCallerKey, type PeerInfo } from "./limit/caller/caller_key.ts";
import {
  CALLER_DENIED,
  CALLER_EXEMPT,
  CALLER_LIMITED,
  createCallerVerdict,
  type ServedRefusal,
} from "./limit/caller/caller_controls.ts";
import {
  type Decision,
  pending,
  policyOf,
  preflightDecision,
  type RateLimitConstants,
  rateLimitConstants,
  type RateLimitStore,
  servedRefusal,
  undecided,
} from "./limit/core/decision.ts";
import type { Content } from "./pages/content.ts";
import {
  type Answers,
  type Chooser,
  createChooser,
  forMethod,
  type PathAnswers,
} from "./respond/answers.ts";
import { createRefuse, type Refuse } from "./respond/refusal.ts";
import { buildAnswers } from "./respond/paths.ts";
import {
  createResponseCache,
  type ResponseCache,
  type ResponseCacheOptions,
  type ResponseTemplate,
} from "./respond/response_cache.ts";
import { type Answer, createWire, type Wire } from "./respond/wire.ts";
import { once } from "./once.ts";
import { later } from "./timer.ts";
import type { WarmUpOptions } from "./warm_up.ts";

/** A fetch handler as `Deno.serve` calls it. */
export type Handler = (request: Request, info: PeerInfo) => Response | Promise<Response>;

/**
 * The service's handler, with `prepare()`: it builds the representations of every path that needs
 * no npm package (all but the pages; their ETags are Web Crypto digests, asynchronous) and resolves
 * once they are built (tests). Until then nothing is built: each path's first request builds its own
 * (or the warm-up does), so that a cold start's first response waits for one path, not all
 * (lib/README.md, "Cold start"). A path whose representations failed to build answers 500.
 */
export type ServiceHandler = Handler & {
  prepare(): Promise<void>;
  /**
   * Answers a request the runtime's HTTP parser refused to read (Node's entry: its head malformed,
   * too large, or late), with its Error for the caller when known: `respond/refusal.ts`.
   */
  refuse: Refuse;
  /**
   * The request's answer before any `Response` is built, with every decision `fetch` makes (the
   * caller, the limit, the path, the representation, the access log's record): `fetch` is this
   * answer made a `Response`. A runtime that sends plain values sends it through `wire` instead
   * (Node's entry, `node/fast_path.ts`). The request needs only its method, URL and fields' `get`
   * and `has`.
   */
  answer: AnswerHandler;
  /** The wire form of an answer: status, flat fields, body bytes (`respond/wire.ts`). */
  wire: Wire;
};

/** The handler's answer to a request, a promise while it waits (a store, a representation). */
export type AnswerHandler = (request: Request, info: PeerInfo) => Answer | Promise<Answer>;

/** Options of {@linkcode createHandler}. */
export interface HandlerOptions {
  /** Validated configuration. */
  config: Config;
  /** Loaded content. */
  content: Content;
  /** Where rate-limit state lives. */
  store: RateLimitStore;
  /** Clock in ms since the epoch; defaults to `Date.now`. */
  now?: () => number;
  /** Receives one record per request; omitted means no access log. */
  accessLog?: (record: AccessRecord) => void;
  /** Receives unexpected errors (answered 500). */
  onError?: (error: unknown) => void;
  /**
   * Called once, the first time a request's caller has no IP address (a unix-socket or vsock peer
   * not trusted by `TRUSTED_PROXIES=unix`, or one that forwarded no client address): such requests
   * share one rate-limit budget, which the operator must hear about.
   */
  onNoAddress?: () => void;
  /** Options of the cache of prebuilt responses. */
  responseCache?: ResponseCacheOptions;
  /**
   * Requests come from the runtime's own HTTP server, listening on `config.hostname` (Deno's
   * `main.ts`, Node's entry), not built in code or handed over by a platform (Workers): a request
   * that named no host is answered 400 (RFC 9112 section 3.2; `namesNoHost` in http/message.ts).
   */
  requireHost?: boolean;
  /**
   * Build every representation and compressed variant in the background, one per macrotask, starting
   * `warmUp.delayMs` after start-up, so that later requests do not wait for them. Until then (and
   * without a warm-up) each is built by the first request that needs it.
   */
  warmUp?: WarmUpOptions;
}

/**
 * Builds the service's fetch handler.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadConfig } from "./config/config.ts";
 * import { recordEnv } from "./config/env.ts";
 * import { policyOf } from "./limit/core/decision.ts";
 * import { MemoryStore } from "./limit/memory/memory_store.ts";
 * import { DISK_STATIC_FILES } from "./server/static_files.ts";
 * import { loadContent } from "./pages/content.ts";
 * const loaded = loadConfig(recordEnv({}));
 * assert(loaded.ok);
 * const content = loadContent(loaded.config, DISK_STATIC_FILES);
 * assert(content.ok);
 * const store = new MemoryStore(policyOf(loaded.config), { sweep: false });
 * const handler = createHandler({ config: loaded.config, content: content.content, store });
 * const response = await handler(new Request("http://localhost/api/v1/platform"), {
 *   remoteAddr: { hostname: "192.0.2.1" },
 * });
 * assert.equal(response.status, 200);
 * assert.equal(response.headers.get("ratelimit-remaining"), "59");
 * ```
 */
export function createHandler(options: HandlerOptions): ServiceHandler {
  const parts = setUp(options);
  const { now, answers, callerKeyOf, cache, noDecision, record } = parts;
  const handle = createHandle(parts, controlsOf(options.config));
  const onError = options.onError;

  const fail = (error: unknown, request: Request): Answer => {
    onError?.(error);
    const target = requestPathOf(request.url, request.headers.get("host"));
    const fixed = answers.paths.get(target)?.fixed ?? answers.unknown;
    const pair = fixed.internalError;
    return { template: forMethod(pair, request.method), decision: noDecision, outcome: undefined };
  };

  const answer: AnswerHandler = (request, info) => {
    const started = now();
    const host = request.headers.get("host");
    const target = requestPathOf(request.url, host);
    let key = "";
    let result: Answer | Promise<Answer>;
    try {
      key = callerKeyOf(request.headers, info);
      result = handle(request, key, started, target);
    } catch (error) {
      result = fail(error, request);
    }
    if (record === undefined) {
      return result instanceof Promise ? result.catch((error) => fail(error, request)) : result;
    }
    if (result instanceof Promise) {
      return result.catch((error) => fail(error, request)).then((answered) =>
        logged(record, request, target, key, started, host, answered)
      );
    }
    return logged(record, request, target, key, started, host, result);
  };
  const respond = (answered: Answer): Response =>
    cache.respond(answered.template, answered.decision);
  const handler: Handler = (request, info) => {
    const answered = answer(request, info);
    return answered instanceof Promise ? answered.then(respond) : respond(answered);
  };
  return Object.assign(handler, {
    prepare: once(() => prepareEager(answers)),
    refuse: createRefuse({
      ...parts,
      behindProxies: options.config.trustedProxies.ranges.length > 0,
    }),
    answer,
    wire: createWire(parts.constants),
  });
}

/** Hands `answered`'s record to the access log and returns the answer. */
function logged(
  record: AccessRecorder,
  request: Request,
  target: string,
  key: string,
  started: number,
  host: string | null,
  answered: Answer,
): Answer {
  const status = answered.template.status;
  record(request.method, target, key, started, status, badHost(host, status), answered.outcome);
  return answered;
}

/**
 * The per-request answer, from the caller key on: the operator's controls (a denied caller's 403
 * before any store call; an exempt caller's, or in report mode anyone's, would-be refusal served),
 * the store's decision (its `peek` for a CORS preflight), the chosen answer with the decision's
 * fields.
 */
function createHandle(
  { store, answers, choose }: SetUp,
  { verdictOf, servesAll, denied }: Controls,
): (
  request: Request,
  key: string,
  started: number,
  target: string,
) => Answer | Promise<Answer> {
  const answersOf = lastPathFirst(answers.paths);
  // `why`: a would-be refusal served (an exempt caller, or RATE_LIMIT_MODE=report), for the log.
  const answer = (
    request: Request,
    path: PathAnswers | undefined,
    decision: Decision,
    why?: ServedRefusal,
  ): Answer | Promise<Answer> => {
    const chosen = choose(request, path, decision);
    return chosen instanceof Promise
      ? chosen.then((template) => ({ template, decision, outcome: why }))
      : { template: chosen, decision, outcome: why };
  };
  const served = (
    request: Request,
    path: PathAnswers | undefined,
    decision: Decision,
    why: ServedRefusal,
  ) =>
    decision.allowed
      ? answer(request, path, decision)
      : answer(request, path, servedRefusal(decision), why);
  return (request, key, started, target) => {
    const path = answersOf(target);
    const method = request.method;
    const verdict = verdictOf === undefined ? CALLER_LIMITED : verdictOf(key);
    if (verdict === CALLER_DENIED) {
      // Before any store call: a denied caller costs the store nothing, and a store that is down
      // changes nothing for it. Only an observer of the decisions hears of it (the metric).
      store.denied?.(key);
      const forbidden = forMethod((path?.fixed ?? answers.unknown).forbidden, method);
      return { template: forbidden, decision: denied, outcome: "denied" };
    }
    // The method first: a request that is not OPTIONS never asks for its headers here.
    if (method === "OPTIONS" && isCorsPreflight(method, request.headers)) {
      const preflight = (path?.fixed ?? answers.unknown).preflight;
      const granted = preflightDecision(store.peek(key, started));
      return pending(granted)
        ? Promise.resolve(granted).then((decision) => preflightAnswer(preflight, decision))
        : preflightAnswer(preflight, granted);
    }
    // A thenable too: a Durable Object's RPC result is not `instanceof Promise` (`pending`).
    const decision = store.hit(key, started);
    // An exempt caller's would-be refusal is `exempted` in either mode: enforced, it is served too.
    const serves = verdict === CALLER_EXEMPT ? "exempted" : servesAll;
    if (serves !== undefined) {
      return pending(decision)
        ? Promise.resolve(decision).then((decided) => served(request, path, decided, serves))
        : served(request, path, decision, serves);
    }
    return pending(decision)
      ? Promise.resolve(decision).then((decided) => answer(request, path, decided))
      : answer(request, path, decision);
  };
}

/** The answer to a CORS preflight (never counted, never refused). */
function preflightAnswer(preflight: ResponseTemplate, decision: Decision): Answer {
  return { template: preflight, decision, outcome: undefined };
}

/**
 * Whether an answer of `status` refused its request for its `Host`, missing or invalid (the only
 * 400 the handler sends). The handler logs the target's path (`requestPathOf`), not what a hostile
 * `Host` makes of the URL (lib/README.md, "Host").
 */
function badHost(host: string | null, status: number): boolean {
  return status === 400 && (host === null || !isValidHost(host));
}

/**
 * A look-up in the path table that answers the path of the previous request without hashing:
 * nearly every request in a row names the same path, and a path read from a request is a new
 * string each time, whose hash the map would compute first.
 */
function lastPathFirst(
  paths: ReadonlyMap<string, PathAnswers>,
): (path: string) => PathAnswers | undefined {
  let lastTarget: string | undefined;
  let lastPath: PathAnswers | undefined;
  return (target) => {
    if (target === lastTarget) return lastPath;
    lastPath = paths.get(target);
    lastTarget = target;
    return lastPath;
  };
}

/** Builds the representations of every path that needs no npm package; a failure is left to its path. */
function prepareEager(answers: Answers): Promise<void> {
  const eager = [...new Set(answers.paths.values())].filter((path) => path.eager);
  return Promise.all(eager.map((path) => path.prepare().catch(() => {}))).then(() => {});
}

/** How long after start-up the warm-up (`warm_up.ts`) begins unless told otherwise, in ms. */
const WARM_UP_DELAY_MS = 500;

/**
 * Starts the warm-up (`warm_up.ts`) once its delay has passed, importing its module only then, so
 * that a cold start's first response does not wait for it to load (lib/README.md, "Cold start").
 * Not `setTimeout`: its first use loads Node's timers, which the first response would wait for.
 */
function scheduleWarmUp(paths: ReadonlyMap<string, PathAnswers>, options: WarmUpOptions): void {
  later(options.delayMs ?? WARM_UP_DELAY_MS, () => {
    if (options.signal?.aborted) return;
    import("./warm_up.ts").then(
      ({ warmUp }) => warmUp(new Set(paths.values()), options),
      (error) => options.onError?.(error),
    );
  });
}

/** What the operator's controls need per request (lib/limit/caller/caller_controls.ts). */
interface Controls {
  /** The verdict on a caller key; undefined when no list is set. */
  verdictOf: ((key: string) => number) | undefined;
  /** `report_refused` in report mode: every would-be refusal is served. */
  servesAll: ServedRefusal | undefined;
  /** What a denied caller's 403 reports: nothing left, the window; not a refusal to retry. */
  denied: Decision;
}

/** The controls of `config`: `RATE_LIMIT_EXEMPT`, `RATE_LIMIT_DENY` and `RATE_LIMIT_MODE`. */
function controlsOf(config: Config): Controls {
  const verdictOf = createCallerVerdict(config.rateLimitExempt, config.rateLimitDeny);
  const servesAll = config.rateLimitMode === "report" ? "report_refused" : undefined;
  return {
    verdictOf,
    servesAll,
    denied: { allowed: true, remaining: 0, resetSeconds: config.rateLimitWindowSeconds },
  };
}

/** What {@linkcode createHandler} builds once, at start-up. */
interface SetUp {
  store: RateLimitStore;
  now: () => number;
  answers: Answers;
  callerKeyOf: (headers: Pick<Headers, "get">, info: PeerInfo) => string;
  cache: ResponseCache;
  /** The rate-limit field values every response carries alike. */
  constants: RateLimitConstants;
  choose: Chooser;
  /** What a 500 reports when no decision was made. */
  noDecision: Decision;
  record: AccessRecorder | undefined;
}

/** Builds the paths' answers, the caller key, the response cache and the recorder. */
function setUp(options: HandlerOptions): SetUp {
  const { config, content } = options;
  const now = options.now ?? Date.now;
  const answers = buildAnswers(config, content);
  const constants = rateLimitConstants(policyOf(config));
  if (options.warmUp) scheduleWarmUp(answers.paths, options.warmUp);
  return {
    store: options.store,
    now,
    answers,
    callerKeyOf: createCallerKey({
      trustedProxies: config.trustedProxies,
      forwardedHeader: config.forwardedHeader,
      ...(options.onNoAddress ? { onNoAddress: once(options.onNoAddress) } : {}),
    }),
    cache: createResponseCache(constants, options.responseCache),
    constants,
    choose: createChooser(answers, options.requireHost ? { listenHostname: config.hostname } : {}),
    noDecision: undecided(policyOf(config)),
    record: options.accessLog ? createAccessRecorder(options.accessLog, now) : undefined,
  };
}
