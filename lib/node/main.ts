/**
 * The service on Node.js (24.7 and later: `npm ci && npm start`, or `node lib/node/main.ts`), read top
 * to bottom as `main.ts` is for Deno: configure from the environment, open the store, build the same
 * handler (`createHandler`), serve it on `HOSTNAME:PORT` (`serve.ts`), and stop gracefully on SIGTERM
 * and SIGINT: `Connection: close` for {@linkcode DRAIN_MS}, then finish the requests in flight, flush
 * the access log, close the store and exit. Events are JSON lines on stderr, the access log is on
 * stdout, and a failed start is one sentence and exit 1.
 *
 * Node runs these sources as they are, stripping their types (no build: tests/bench/README.md,
 * "Node"). The store is whatever `lib/limit/open_store.ts` opens for `RATE_LIMIT_STORE`, but Deno
 * KV, which only Deno has.
 *
 * @module
 */

import process from "node:process";
import { createAccessLog } from "../access_log.ts";
import { loadConfig } from "../config.ts";
import { createHandler } from "../handler.ts";
import { loadContent } from "../pages/content.ts";
import { openRateLimitStore } from "../limit/open_store.ts";
import { REPORT_MODE_WARNING } from "../limit/caller/caller_controls.ts";
import { isSqliteOpenFailure } from "../limit/sqlite/open_failure.ts";
import type { RateLimitStore } from "../limit/core/decision.ts";
import { storeEventOptions } from "../store_events.ts";
import { errorFields, event, fatal, fatalSentence, STDOUT, writeAllSync } from "./events.ts";
import { NODE_STATIC_FILES } from "./files.ts";
import { useCompressor } from "../http/representation.ts";
import { compressLikeDeno } from "./compress.ts";
import { type NodeServeEvent, type NodeServer, serveNode } from "./serve.ts";
import { explainListenError, explainStartupError } from "./startup.ts";

/** How long the service keeps answering, with `Connection: close`, once shutdown begins, in ms. */
export const DRAIN_MS = 1000;
/** The longest a shutdown may take before the process exits anyway, in ms (as Deno's entry). */
export const STOP_DEADLINE_MS = 4000;

/** The oldest Node this runs on: `CompressionStream` has brotli from 24.7. */
const MIN_NODE: readonly [number, number] = [24, 7];

/** Refuses, in one sentence, a Node older than {@linkcode MIN_NODE}. */
function checkRuntime(): void {
  const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
  if (major < MIN_NODE[0] || (major === MIN_NODE[0] && minor < MIN_NODE[1])) {
    fatalSentence(
      `Cannot start: Node ${process.versions.node} is too old (its CompressionStream has no brotli), so run Node ${
        MIN_NODE.join(".")
      } or later (24 LTS or 26 LTS); nothing is served.`,
    );
  }
}

/** The validated configuration and content, or one sentence per problem and exit 1. */
function configure() {
  const loaded = loadConfig((name) => process.env[name]);
  if (!loaded.ok) fatal(loaded.errors);
  const { config } = loaded;
  if (config.rateLimitStore === "kv") {
    fatal([
      "RATE_LIMIT_STORE=kv needs Deno (Deno KV has no Node runtime): on Node set RATE_LIMIT_STORE to memory, redis or sqlite (with SQLITE_PATH), or run the service with Deno",
    ]);
  }
  const content = loadContent(config, NODE_STATIC_FILES);
  if (!content.ok) fatal(content.errors);
  // Said on every start, as Deno's entry says it (lib/server/configure.ts).
  if (config.rateLimitMode === "report") {
    event("warn", REPORT_MODE_WARNING, {
      limit: config.rateLimit,
      window: config.rateLimitWindowSeconds,
    });
  }
  return { config, content: content.content };
}

/** The rate-limit store `RATE_LIMIT_STORE` names, its incidents logged; one sentence if it fails. */
async function openStore(config: ReturnType<typeof configure>["config"]): Promise<RateLimitStore> {
  try {
    return await openRateLimitStore(config, storeEventOptions(config, event));
  } catch (error) {
    return fatalSentence(
      isSqliteOpenFailure(error)
        ? `${error.message}; nothing is served.`
        : explainStartupError(error),
    );
  }
}

/** Writes the listener's events: where it listens, and each accept incident once. */
function logServeEvent(baseUrl: string): (serveEvent: NodeServeEvent) => void {
  return (serveEvent) => {
    if (serveEvent.kind === "listening") {
      event("info", "listening", { address: serveEvent.address, baseUrl, runtime: "node" });
    } else if (serveEvent.kind === "accept_failed") {
      event(
        "warn",
        "accepting connections failed: serving the open ones and listening again when possible",
        { error: serveEvent.error },
      );
    } else {
      event("info", "accepting connections again", { downMs: serveEvent.downMs });
    }
  };
}

/**
 * The stop at a signal (once): `Connection: close` for a moment, so that busy keep-alive clients
 * stop reusing their connection before it is closed under them; finish what is in flight; flush the
 * access log; close the store; exit. A stop past its deadline exits anyway.
 */
function stopper(
  server: NodeServer,
  parts: { store: RateLimitStore; flush: () => void; warmUpStop: AbortController },
): (signal: string) => Promise<void> {
  let stopping = false;
  return async (signal) => {
    if (stopping) return;
    stopping = true;
    parts.warmUpStop.abort();
    event("info", "shutting down: finishing requests in flight", { signal });
    setTimeout(() => {
      parts.flush();
      event("warn", "shutdown overran its deadline: exiting with connections still open", {
        deadlineMs: STOP_DEADLINE_MS,
      });
      server.closeAll();
      process.exit(0);
    }, STOP_DEADLINE_MS).unref();
    server.drain();
    await new Promise((resolve) => setTimeout(resolve, DRAIN_MS));
    await server.shutdown();
    parts.flush();
    await parts.store.close();
    event("info", "stopped");
    process.exit(0);
  };
}

/** Configures, opens the store, serves, and stops at SIGTERM or SIGINT. */
async function main(): Promise<void> {
  checkRuntime();
  const { config, content } = configure();
  const store = await openStore(config);
  const accessLog = config.accessLog
    ? createAccessLog((chunk) => writeAllSync(STDOUT, chunk))
    : undefined;
  const warmUpStop = new AbortController();
  useCompressor(compressLikeDeno);
  const handler = createHandler({
    config,
    content,
    store,
    // A Response built per request, not a clone of a kept one: on Node a clone tees the body's
    // stream and costs what building one costs (tests/bench/README.md, "Node"), and after a
    // thousand unread responses the read of a kept one's clone never settles (Node 24 and 26).
    responseCache: { keep: false },
    requireHost: true,
    ...(accessLog ? { accessLog: accessLog.log } : {}),
    onError: (error) => event("error", "unexpected error answered 500", errorFields(error)),
    onNoAddress: () =>
      event(
        "error",
        "a request came from a peer with no IP address and no forwarded client address: every such caller shares ONE rate-limit budget. Said once.",
      ),
    warmUp: {
      signal: warmUpStop.signal,
      onDone: ({ variants, ms }) =>
        event("info", "warmed up: every representation built", { variants, ms: Math.round(ms) }),
      onError: (error) =>
        event(
          "error",
          "a representation cannot be built: its path answers 500",
          errorFields(error),
        ),
    },
  });
  const server = await serveNode(handler, {
    hostname: config.hostname,
    port: config.port,
    reusePort: config.reusePort,
    onEvent: logServeEvent(config.baseUrl),
    onError: (error) => event("error", "a response could not be sent", errorFields(error)),
  }).catch((error) => fatalSentence(explainListenError(error, config)));
  const stop = stopper(server, { store, flush: () => accessLog?.flush(), warmUpStop });
  for (const signal of ["SIGTERM", "SIGINT"] as const) process.on(signal, () => void stop(signal));
}

// Anything thrown while starting that no check explains still ends in one sentence; once serving, a
// rejection no one handles ends the process as Node's default (and Deno's) does.
const onStartupFailure = (reason: unknown): never => fatalSentence(explainStartupError(reason));
process.on("unhandledRejection", onStartupFailure);
await main().catch(onStartupFailure);
process.off("unhandledRejection", onStartupFailure);
