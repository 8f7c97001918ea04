/**
 * The service on Node.js (24.7 and later: `npm ci && npm start`, or `node lib/node/main.ts`), read top
 * to bottom as `main.ts` is for Deno: check the runtime and the npm packages, configure from the
 * environment, open the store, build the same handler (`lib/lifecycle/service_handler.ts`), serve it
 * on `HOSTNAME:PORT` (`serve.ts`), with the operator port on `HEALTH_PORT` when set
 * (`health_listener.ts`), and stop gracefully on SIGTERM and SIGINT, or when `npm start`'s
 * npm is gone (`npm_parent.ts`), as every entry stops (`lib/lifecycle/stop.ts`). Events are JSON
 * lines on stderr, the access log is on stdout (`events.ts`: neither ever waits for its reader), and
 * a failed start is one sentence and exit 1.
 *
 * Node runs these sources as they are, stripping their types (no build: tests/bench/README.md,
 * "Node"). The store is whatever `lib/limit/open_store.ts` opens for `RATE_LIMIT_STORE`, but Deno
 * KV, which only Deno has.
 *
 * @module
 */

import { flushCompileCache } from "node:module";
import process from "node:process";
import { createAccessLog } from "../access_log.ts";
import { type Config, loadConfig } from "../config/config.ts";
import type { RateLimitStore } from "../limit/core/decision.ts";
import { openRateLimitStore } from "../limit/open_store.ts";
import { isSqliteOpenFailure } from "../limit/sqlite/open_failure.ts";
import { errorFields, event, fatal, fatalSentence } from "../lifecycle/events.ts";
import { logListenerEvent } from "../lifecycle/listener_events.ts";
import { createServiceHandler } from "../lifecycle/service_handler.ts";
import { explainListenError, explainStartupError } from "../lifecycle/startup_errors.ts";
import {
  createLifecycle,
  hearStopSignals,
  type Lifecycle,
  stopGracefully,
} from "../lifecycle/stop.ts";
import { sayStartWarnings } from "../lifecycle/warnings.ts";
import { loadContent } from "../pages/content.ts";
import { storeEventOptions } from "../store_events.ts";
import { STDERR_LINES, STDOUT_LINES, useNodeEvents } from "./events.ts";
import { NODE_STATIC_FILES } from "./files.ts";
import { useCompressor } from "../http/representation.ts";
import { compressLikeDeno } from "./compress.ts";
import { serveHealthNode } from "./health_listener.ts";
import { watchNpmParent } from "./npm_parent.ts";
import { missingPackages, missingPackagesSentence } from "./packages.ts";
import { type NodeHandler, type NodeServer, serveNode } from "./serve.ts";

/** The oldest Node this runs on: `CompressionStream` has brotli from 24.7. */
const MIN_NODE: readonly [number, number] = [24, 7];

/** Refuses, in one sentence, a Node older than {@linkcode MIN_NODE} or a checkout without npm ci. */
async function checkRuntime(): Promise<void> {
  const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
  if (major < MIN_NODE[0] || (major === MIN_NODE[0] && minor < MIN_NODE[1])) {
    await fatalSentence(
      `Cannot start: Node ${process.versions.node} is too old (its CompressionStream has no brotli), so run Node ${
        MIN_NODE.join(".")
      } or later (24 LTS or 26 LTS); nothing is served.`,
    );
  }
  const missing = missingPackages();
  if (missing.length > 0) await fatalSentence(missingPackagesSentence(missing));
}

/** The validated configuration and content, or one sentence per problem and exit 1. */
async function configure() {
  const loaded = loadConfig((name) => process.env[name]);
  if (!loaded.ok) return fatal(loaded.errors);
  const { config } = loaded;
  if (config.rateLimitStore === "kv") {
    await fatal([
      "RATE_LIMIT_STORE=kv needs Deno (Deno KV has no Node runtime): on Node set RATE_LIMIT_STORE to memory, redis or sqlite (with SQLITE_PATH), or run the service with Deno",
    ]);
  }
  const content = loadContent(config, NODE_STATIC_FILES);
  if (!content.ok) return fatal(content.errors);
  return { config, content: content.content };
}

/** The rate-limit store `RATE_LIMIT_STORE` names, its incidents logged; one sentence if it fails. */
async function openStore(
  config: Awaited<ReturnType<typeof configure>>["config"],
): Promise<RateLimitStore> {
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

/** The stop at `signal` (`lib/lifecycle/stop.ts`), with what Node's server and process give it. */
function stopOn(
  lifecycle: Lifecycle,
  server: NodeServer,
  parts: { store: RateLimitStore; flush: () => void },
): (signal: string) => Promise<void> {
  return (signal) =>
    stopGracefully(lifecycle, signal, {
      drain: () => server.drain(),
      shutdown: () => server.shutdown(),
      closeAll: () => server.closeAll(),
      flushAccessLog: parts.flush,
      closeStore: () => parts.store.close(),
      lines: { stdout: STDOUT_LINES, stderr: STDERR_LINES },
      exit: (code) => process.exit(code),
    });
}

/**
 * Listens: on the operator port first when `HEALTH_PORT` is set (a probe never finds the public
 * port serving before it), then on the public port, the start-up warnings said once before its
 * "listening", as Deno's entry says them; one sentence and exit 1 when either cannot.
 */
async function listen(
  handler: NodeHandler,
  config: Config,
  lifecycle: Lifecycle,
): Promise<NodeServer> {
  if (config.healthPort !== undefined) {
    const target = { hostname: config.hostname, port: config.healthPort };
    await serveHealthNode(lifecycle, config).catch((error) =>
      fatalSentence(explainListenError(error, { ...target, portVariable: "HEALTH_PORT" }))
    );
  }
  let warned = false;
  return await serveNode(handler, {
    hostname: config.hostname,
    port: config.port,
    reusePort: config.reusePort,
    onEvent: (listenerEvent) => {
      // A listener that could not start says only why.
      if (listenerEvent.kind === "listening" && !warned) {
        warned = true;
        sayStartWarnings({ config, entry: "node", now: Date.now() });
      }
      logListenerEvent(listenerEvent, config.baseUrl, { runtime: "node" });
    },
    onError: (error) => event("error", "a response could not be sent", errorFields(error)),
  }).catch((error) => fatalSentence(explainListenError(error, config)));
}

/** Checks, configures, opens the store, serves, and stops at SIGTERM or SIGINT. */
async function main(): Promise<void> {
  await checkRuntime();
  const { config, content } = await configure();
  const store = await openStore(config);
  const accessLog = config.accessLog
    ? createAccessLog((chunk) => STDOUT_LINES.write(chunk))
    : undefined;
  const lifecycle = createLifecycle();
  useCompressor(compressLikeDeno);
  const handler = createServiceHandler({
    config,
    content,
    store,
    accessLog,
    lifecycle,
    // Node sends the handler's answers as they are (fast_path.ts) and builds no Response; should
    // `fetch` be called, a Response built per request, not a kept one's clone: after a thousand
    // unread responses the read of such a clone never settles on Node 24 and 26.
    responseCache: { keep: false },
    noAddress:
      "a request came from a peer with no IP address and no forwarded client address: every such caller shares ONE rate-limit budget. Said once.",
    // Every module is loaded once the warm-up is done: the compile cache (`NODE_COMPILE_CACHE`, npm
    // start) is written then, not at the exit, so the next start loads no type stripper (17 MiB)
    // even if this one is killed (tests/bench/README.md, "Node").
    onWarm: flushCompileCache,
  });
  // Heard before anything listens: once "listening" is said, a signal always meets the stop.
  const signals = hearStopSignals((signal, handler) => process.on(signal, handler));
  const server = await listen(handler, config, lifecycle);
  lifecycle.serving();
  const stop = stopOn(lifecycle, server, { store, flush: () => accessLog?.flush() });
  signals.ready((signal) => void stop(signal));
  watchNpmParent(() => {
    event("warn", "npm start's npm process is gone: stopping as on SIGTERM");
    void stop("SIGTERM");
  });
}

useNodeEvents();
// Anything thrown while starting that no check explains still ends in one sentence; once serving, a
// rejection no one handles ends the process as Node's default (and Deno's) does.
const onStartupFailure = (reason: unknown) => fatalSentence(explainStartupError(reason));
process.on("unhandledRejection", onStartupFailure);
await main().catch(onStartupFailure);
process.off("unhandledRejection", onStartupFailure);
