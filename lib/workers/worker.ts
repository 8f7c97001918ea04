/**
 * The service as a Cloudflare Worker: `export default { fetch }` over the same `createHandler` as
 * `main.ts`, with what differs on Workers and nothing else.
 *
 * - Configuration: the Worker's bindings (vars and secrets) through `lib/config/`'s rules
 *   (`bindings.ts`), read once per isolate, at its first request (a Worker's `env` exists only
 *   there), and nothing of that request: no value of a request becomes configuration. Invalid
 *   (`deno task worker` and `deno task worker:build` refuse it first; vars changed in the
 *   dashboard reach an isolate anyway), every request is answered 500 `internal_error` with the
 *   RateLimit fields and CORS (`misconfigured.ts`) and the problems are logged, one message, once
 *   per isolate (`wrangler tail`, Workers Logs): a Worker cannot refuse to start, and a 500 is what
 *   a monitor notices. Warnings (`worker_rules.ts`) are logged once per isolate too.
 * - Content: the static files' texts, given by the build (`lib/build/worker.ts` embeds `static/`): no file
 *   system.
 * - Caller: `CF-Connecting-IPv6` where Cloudflare sets it (the zone's Pseudo IPv4 rewrites an IPv6
 *   caller's `CF-Connecting-IP` into a class E IPv4 hash, and keeps the real address there), else
 *   `CF-Connecting-IP`; the edge sets both, replacing any a client sent. Locally (`deno task
 *   worker`, miniflare) a client's are passed on as sent. A request without either (a service
 *   binding) or with a value that is no IP address has no address: one shared budget, logged once.
 *   Another zone's Worker arrives from Cloudflare's Workers address: deploy/README.md.
 * - Responses: built per request (`keep: false`): a `Response` belongs to the request that made it.
 * - No timers: no warm-up (each path builds its representations on its first request), the memory
 *   store sweeps nothing (its caller cap, sized for an isolate, bounds it), the access log (off
 *   unless `ACCESS_LOG` is set) writes per request to the console. Compression is left to Cloudflare's edge (lib/README.md, "Compression and caching").
 *
 * @module
 */
// deno-lint-ignore-file no-console -- Workers' logs are the console

import { type Config } from "../config/config.ts";
import { formatConfigErrors, redactSecrets } from "../config/messages.ts";
import { createHandler, type ServiceHandler } from "../handler.ts";
import { parseIp } from "../http/address.ts";
import { namedMessageOf } from "../text/error_message.ts";
import type { PeerInfo } from "../limit/caller/caller_key.ts";
import { policyOf, type RateLimitStore } from "../limit/core/decision.ts";
import { MemoryStore } from "../limit/memory/memory_store.ts";
import { loadContent } from "../pages/content.ts";
import { type EventOutput, useEventOutput } from "../lifecycle/events.ts";
import { sayStartWarnings, warn } from "../lifecycle/warnings.ts";
import { type Bindings, bindingsEnv, workerConfig } from "./bindings.ts";
import { misconfiguredAnswer } from "./misconfigured.ts";
import { openDurableStore } from "./store.ts";

/** A Worker's module: Cloudflare calls `fetch` per request with the bindings. */
export interface WorkerModule {
  /** Answers one request. */
  fetch(request: Request, env: Bindings): Response | Promise<Response>;
}

/** Opens the Durable Object store over the `RATE_LIMITER` binding (`store.ts`). */
export type OpenDurableStore = (bindings: Bindings, config: Config) => RateLimitStore;

/** What an isolate starts with at its first request: the handler, or the misconfigured answer. */
type Started = { ok: true; handler: ServiceHandler } | {
  ok: false;
  answer: (request: Request) => Response;
};

/**
 * The Worker over `files` (each static file's text by its name, as the build embeds them).
 *
 * @param openDurable opens the Durable Object store (tests may give another)
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { STATIC_DIR, STATIC_FILES } from "../pages/content.ts";
 * const files = Object.fromEntries(
 *   STATIC_FILES.map((name) => [name, Deno.readTextFileSync(`${STATIC_DIR}/${name}`)]),
 * );
 * const worker = createWorker(files, () => assert.fail("no Durable Object with memory"));
 * const request = new Request("https://api.example.com/api/v1/platform", {
 *   headers: { "cf-connecting-ip": "192.0.2.7" },
 * });
 * const env = { RATE_LIMIT_STORE: "memory", PUBLIC_BASE_URL: "https://api.example.com" };
 * const response = await worker.fetch(request, env);
 * assert.equal(response.status, 200);
 * assert.equal(response.headers.get("ratelimit-remaining"), "59");
 * const platform = await response.json();
 * assert.equal(platform.openapi, "https://api.example.com/openapi.json");
 * ```
 */
export function createWorker(
  files: Readonly<Record<string, string>>,
  openDurable: OpenDurableStore = openDurableStore,
): WorkerModule {
  let started: Started | undefined;
  useEventOutput(WORKER_EVENTS);
  return {
    fetch(request, env) {
      started ??= start(env, files, openDurable);
      if (!started.ok) return started.answer(request);
      return started.handler(request, peerOf(request));
    },
  };
}

/**
 * The caller's address as Cloudflare gives it: `CF-Connecting-IP`, or `CF-Connecting-IPv6` when
 * `CF-Connecting-IP` is a Pseudo IPv4 address (240.0.0.0/4, class E: the zone's Pseudo IPv4 set to
 * overwrite, which hashes an IPv6 caller into that range and sends its real address beside it). Only
 * then: with Pseudo IPv4 off, Cloudflare does not set `CF-Connecting-IPv6` and a client could send
 * its own, a new caller key for every request. None without an address or with a value that is no
 * IP address (Cloudflare always sets one; a hostile value reaches here only locally, and must not
 * become a caller key of its own).
 */
export function peerOf(request: Request): PeerInfo {
  const headers = request.headers;
  const address = headers.get("cf-connecting-ip");
  const ip = address === null ? undefined : parseIp(address);
  if (ip === undefined) return { remoteAddr: { transport: "none" } };
  if (ip.length === 4 && ip[0]! >= 240) {
    const v6 = headers.get("cf-connecting-ipv6");
    if (v6 !== null && parseIp(v6)?.length === 16) return { remoteAddr: { hostname: v6 } };
  }
  return { remoteAddr: { hostname: address! } };
}

/**
 * The Worker's event output: the console, which Workers Logs keeps (a JSON line's fields become the
 * event's). A Worker cannot exit: its failures are answered per request instead.
 */
const WORKER_EVENTS: EventOutput = {
  event(level, line) {
    console[level](line.trimEnd());
  },
  fatal(text) {
    console.error(text);
    return Promise.reject(new Error(text));
  },
};

/** Configures the isolate at its first request from its bindings: the handler, or the problems logged once. */
function start(
  env: Bindings,
  files: Readonly<Record<string, string>>,
  openDurable: OpenDurableStore,
): Started {
  const configured = workerConfig(env);
  if (!configured.ok) return refused(env, configured.errors);
  const { config } = configured;
  // Each isolate's start (lib/lifecycle/warnings.ts): Workers Logs keeps each as a JSON event.
  for (const warning of configured.warnings) warn(warning);
  sayStartWarnings({
    config: { ...config, rateLimitStore: configured.store },
    entry: "workers",
    now: Date.now(),
  });
  const content = loadContent(config, { dir: "static", read: (path) => fileOf(files, path) });
  if (!content.ok) return refused(env, content.errors);
  const store = configured.store === "memory"
    ? new MemoryStore(policyOf(config), { maxCallers: config.rateLimitMaxCallers, sweep: false })
    : openDurable(env, config);
  const handler = createHandler({
    config,
    content: content.content,
    store,
    responseCache: { keep: false },
    ...(config.accessLog ? { accessLog: (record) => console.log(record) } : {}),
    onError: (error) => console.error("unexpected error answered 500", describe(error)),
    onNoAddress: () =>
      console.error(
        "a request came without CF-Connecting-IP (a service binding): every such request shares ONE rate-limit budget. Said once.",
      ),
  });
  return { ok: true, handler };
}

/** A static file's text by its path's last segment; a missing one throws, as a missing file does. */
function fileOf(files: Readonly<Record<string, string>>, path: string): string {
  const name = path.slice(path.lastIndexOf("/") + 1);
  const text = Object.hasOwn(files, name) ? files[name] : undefined;
  if (text === undefined) throw new Error(`${name} is not in the Worker's bundle`);
  return text;
}

/** An error's name and message, secrets redacted: never its stack in a log line. */
function describe(error: unknown): string {
  return redactSecrets(namedMessageOf(error));
}

/** Logs `errors` once, as `deno task start` prints them, and answers every request as misconfigured. */
function refused(env: Bindings, errors: string[]): Started {
  console.error(formatConfigErrors(errors));
  return { ok: false, answer: misconfiguredAnswer(bindingsEnv(env)) };
}
