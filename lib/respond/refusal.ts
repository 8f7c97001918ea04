/**
 * The answer to a request the runtime's HTTP parser refused to read: Node's parser refuses, before
 * any handler runs, a head that is malformed or too large, and one that did not arrive in time; Node's
 * entry (lib/node/http1/client_error.ts) answers it here, as the handler answers everything else: the
 * Error of the service, the caller's RateLimit fields where the caller is known, an access-log line.
 *
 * Such a request is not counted: it asked for nothing the service could read, and Deno's runtime
 * answers its own refusals without reaching the handler at all. The fields report the caller's
 * state (the store's `peek`, as for a CORS preflight). The caller is known from the head's fields
 * when it could be read whole, or from the peer's address where no proxy is trusted to name another
 * (`TRUSTED_PROXIES` unset); otherwise, as a 500 does, the fields say that nothing is known to be
 * left (`undecided`), so that every response carries them.
 *
 * @module
 */

import type { AccessRecorder } from "../access_log.ts";
import { requestPathOf } from "../http/message.ts";
import type { PeerInfo } from "../limit/caller/caller_key.ts";
import {
  type Decision,
  pending,
  preflightDecision,
  type RateLimitStore,
} from "../limit/core/decision.ts";
import { type Answers, forMethod } from "./answers.ts";
import type { ResponseCache } from "./response_cache.ts";

/** Why a request was refused before it could be read: its head malformed or too large, or late. */
export type Refusal = "bad_request" | "request_timeout";

/**
 * What could be read of a refused request, when its head was whole: its method, its URL (undefined
 * when its target has a form its method cannot have) and its fields.
 */
export interface ReadHead {
  /** The method, as sent. */
  method: string;
  /** The URL the runtime would give the handler, if the target allows one. */
  url: string | undefined;
  /** The fields. */
  headers: Pick<Headers, "get">;
}

/** Answers a refused request: `head` when it could be read, the peer as the runtime gives it. */
export type Refuse = (
  refusal: Refusal,
  head: ReadHead | undefined,
  info: PeerInfo,
) => Response | Promise<Response>;

/** What {@linkcode createRefuse} answers with: the handler's own parts. */
export interface RefuseParts {
  store: RateLimitStore;
  answers: Answers;
  cache: ResponseCache;
  /** What the fields report when the caller is not known (`undecided`). */
  noDecision: Decision;
  callerKeyOf: (headers: Pick<Headers, "get">, info: PeerInfo) => string;
  now: () => number;
  record: AccessRecorder | undefined;
  /** Whether `TRUSTED_PROXIES` is set: then a peer may be a proxy speaking for someone else. */
  behindProxies: boolean;
}

/** The fields of a request whose head could not be read: none. */
const NO_FIELDS: Pick<Headers, "get"> = { get: () => null };

/** What the access log names a request by when its head could not be read. */
const UNREAD = "-";

/**
 * Creates the answer to refused requests.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadConfig } from "../config/config.ts";
 * import { recordEnv } from "../config/env.ts";
 * import { createCallerKey } from "../limit/caller/caller_key.ts";
 * import { policyOf, rateLimitConstants, undecided } from "../limit/core/decision.ts";
 * import { MemoryStore } from "../limit/memory/memory_store.ts";
 * import { DISK_STATIC_FILES } from "../server/static_files.ts";
 * import { loadContent } from "../pages/content.ts";
 * import { buildAnswers } from "./paths.ts";
 * import { createResponseCache } from "./response_cache.ts";
 * const loaded = loadConfig(recordEnv({}));
 * assert(loaded.ok);
 * const content = loadContent(loaded.config, DISK_STATIC_FILES);
 * assert(content.ok);
 * const constants = rateLimitConstants(policyOf(loaded.config));
 * const refuse = createRefuse({
 *   store: new MemoryStore(policyOf(loaded.config), { sweep: false }),
 *   answers: buildAnswers(loaded.config, content.content),
 *   cache: createResponseCache(constants),
 *   noDecision: undecided(policyOf(loaded.config)),
 *   callerKeyOf: createCallerKey(loaded.config),
 *   now: Date.now,
 *   record: undefined,
 *   behindProxies: false,
 * });
 * const peer = { remoteAddr: { transport: "tcp" as const, hostname: "192.0.2.1", port: 1 } };
 * const response = await refuse("bad_request", undefined, peer);
 * assert.equal(response.status, 400);
 * assert.equal(response.headers.get("ratelimit-remaining"), "60");
 * ```
 */
export function createRefuse(parts: RefuseParts): Refuse {
  const { store, answers, cache, noDecision, callerKeyOf, now, record, behindProxies } = parts;
  return (refusal, head, info) => {
    const started = now();
    const method = head?.method ?? UNREAD;
    const pair = refusal === "bad_request"
      ? answers.unknown.badRequest
      : answers.unknown.requestTimeout;
    const template = forMethod(pair, method);
    const fields = head?.headers ?? NO_FIELDS;
    const key = callerKeyOf(fields, info);
    // Behind a proxy, a peer with no readable head is the proxy, not the caller.
    const known = head !== undefined || !behindProxies;
    const respond = (decision: Decision): Response => {
      const response = cache.respond(template, decision);
      const url = head?.url;
      const path = url === undefined ? UNREAD : requestPathOf(url, fields.get("host"));
      record?.(method, path, key, started, response.status);
      return response;
    };
    if (!known) return respond(noDecision);
    let peeked: Decision | Promise<Decision>;
    try {
      peeked = preflightDecision(store.peek(key, started));
    } catch {
      return respond(noDecision);
    }
    return pending(peeked)
      ? Promise.resolve(peeked).then(respond, () => respond(noDecision))
      : respond(peeked);
  };
}
