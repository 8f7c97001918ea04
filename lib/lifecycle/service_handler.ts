/**
 * The service's handler as an entry that listens builds it (Deno's main.ts, Node's entry): the
 * handler of `lib/handler.ts` with its access log, its errors, its no-address warning and its
 * warm-up told as events, and the warm-up ended when a stop begins (its steps would only delay the
 * requests being finished).
 *
 * Nothing is built before listening, so the first request is not kept waiting: each path's first
 * request builds its representations (Web Crypto ETags), and the warm-up builds the rest, pages and
 * compressed bodies included (lib/README.md, "Cold start").
 *
 * @module
 */

import type { AccessLog } from "../access_log.ts";
import type { Config } from "../config/config.ts";
import { createHandler, type ServiceHandler } from "../handler.ts";
import type { RateLimitStore } from "../limit/core/decision.ts";
import type { Content } from "../pages/content.ts";
import type { ResponseCacheOptions } from "../respond/response_cache.ts";
import { errorFields, event } from "./events.ts";
import type { Lifecycle } from "./stop.ts";

/** What {@linkcode createServiceHandler} builds on. */
export interface ServiceParts {
  config: Config;
  content: Content;
  store: RateLimitStore;
  /** The access log, when on. */
  accessLog: AccessLog | undefined;
  /** Whose stop ends the warm-up. */
  lifecycle: Lifecycle;
  /** The error said once when a request came from a peer with no address (the entry's fix in it). */
  noAddress: string;
  /** Options of the cache of prebuilt responses (Node keeps none). */
  responseCache?: ResponseCacheOptions;
  /** Called once the warm-up has built every representation (every module is loaded by then). */
  onWarm?: () => void;
}

/** The service's handler, its errors and warm-up reported as events. */
export function createServiceHandler(parts: ServiceParts): ServiceHandler {
  const warmUpStop = new AbortController();
  parts.lifecycle.onStopping(() => warmUpStop.abort());
  return createHandler({
    config: parts.config,
    content: parts.content,
    store: parts.store,
    ...(parts.responseCache ? { responseCache: parts.responseCache } : {}),
    // Its requests come from the runtime's own server: one that names no host is answered 400.
    requireHost: true,
    ...(parts.accessLog ? { accessLog: parts.accessLog.log } : {}),
    onError: (error) => event("error", "unexpected error answered 500", errorFields(error)),
    onNoAddress: () => event("error", parts.noAddress),
    warmUp: {
      signal: warmUpStop.signal,
      onDone: ({ variants, ms }) => {
        parts.onWarm?.();
        event("info", "warmed up: every representation built", { variants, ms: Math.round(ms) });
      },
      onError: (error) =>
        event(
          "error",
          "a representation cannot be built: its path answers 500",
          errorFields(error),
        ),
    },
  });
}
