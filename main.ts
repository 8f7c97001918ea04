/**
 * The service's entry point, read top to bottom: configure, open the store, build the handler,
 * export it for `deno serve`, and, when started with `--listen` (`deno task start`, the compiled
 * binary) or on Deno Deploy, serve it on `HOSTNAME:PORT` (or the address the runtime is given in
 * `DENO_SERVE_ADDRESS`) and stop gracefully on SIGTERM and SIGINT. Each step lives in `lib/server/`.
 *
 * `deno serve` evaluates this module as the main module too and offers no way to tell it apart from
 * `deno run`, so listening is asked for explicitly, or recognised from the platform, never guessed.
 *
 * @module
 */

import { type AccessLog, createAccessLog, writeAll } from "./lib/access_log.ts";
import type { Config } from "./lib/config.ts";
import { createHandler, type ServiceHandler } from "./lib/handler.ts";
import { MIN_SYNC_TIMEOUT_MS } from "./lib/limit/open_store.ts";
import type { RateLimitStore } from "./lib/limit/core/decision.ts";
import type { Content } from "./lib/pages/content.ts";
import { buildAnswers } from "./lib/respond/paths.ts";
import { configure } from "./lib/server/configure.ts";
import { errorFields, event, onFatalExit, onStartupRejection } from "./lib/server/events.ts";
import { runtimeListening, serve } from "./lib/server/serve.ts";
import { DRAIN_MS, STOP_DEADLINE_MS } from "./lib/server/listener.ts";
import { relayServeStop } from "./lib/server/serve_stop.ts";
import { openStore } from "./lib/server/store.ts";
import { exitFlushBoundMs, otelStartWarnings } from "./lib/telemetry/enabled.ts";
import { loadTelemetry, type Telemetry } from "./lib/telemetry/load.ts";

const readEnv = (name: string) => Deno.env.get(name);

/**
 * The service's telemetry, loaded (with npm:@opentelemetry/api) only when Deno exports
 * OpenTelemetry (OTEL_DENO=true).
 */
async function startTelemetry(
  config: Config,
  content: Content,
  onDeploy: boolean,
): Promise<Telemetry | undefined> {
  const telemetry = await loadTelemetry(() => buildAnswers(config, content).paths.keys(), {
    storeKind: config.rateLimitStore,
    storeTimeoutMs: config.rateLimitStoreTimeoutMs,
    syncTimeoutMs: Math.max(config.rateLimitStoreTimeoutMs, MIN_SYNC_TIMEOUT_MS),
  });
  // Deno exports the last interval at exit, after the shutdown: each export is bounded by
  // OTEL_EXPORTER_OTLP_TIMEOUT (default 10 s), so a slow collector could hold the exit past the
  // deadline.
  if (telemetry && DRAIN_MS + exitFlushBoundMs(readEnv) > STOP_DEADLINE_MS) {
    event(
      "warn",
      'OTEL_EXPORTER_OTLP_TIMEOUT lets a slow collector hold the exit past the shutdown deadline: set it to 500 (ms) or less (deploy/README.md, "Observability")',
      { deadlineMs: STOP_DEADLINE_MS, exitFlushBoundMs: exitFlushBoundMs(readEnv) },
    );
  }
  // Deno Deploy takes no OTEL_* variable: nothing there to set.
  if (telemetry && !onDeploy) {
    for (const warning of otelStartWarnings(readEnv)) event("warn", warning);
  }
  return telemetry;
}

/** Whether this is Deno Deploy, read before the configuration (false where env cannot be read). */
function onDenoDeploySafe(): boolean {
  try {
    return readEnv("DENO_DEPLOY") === "true";
  } catch {
    return false;
  }
}

/**
 * The service's handler, its errors and warm-up reported as events. Nothing is built before
 * listening, so the first request is not kept waiting: each path's first request builds its
 * representations (Web Crypto ETags), and the warm-up builds the rest, pages and compressed bodies
 * included (lib/README.md, "Cold start"); stopping ends the warm-up, whose steps would only delay
 * the requests being finished.
 */
function buildHandler(
  started: { config: Config; content: Content; store: RateLimitStore },
  accessLog: AccessLog | undefined,
): ServiceHandler {
  const warmUpStop = new AbortController();
  try {
    for (const signal of ["SIGTERM", "SIGINT"] as const) {
      Deno.addSignalListener(signal, () => warmUpStop.abort());
    }
  } catch {
    // No signal support here: the warm-up runs to its end.
  }
  return createHandler({
    ...started,
    requireHost: true,
    ...(accessLog ? { accessLog: accessLog.log } : {}),
    onError: (error) => event("error", "unexpected error answered 500", errorFields(error)),
    onNoAddress: () =>
      event(
        "error",
        'a request came from a peer with no IP address (unix socket or vsock) and no forwarded client address: every such caller shares ONE rate-limit budget. Put a proxy in front that sets X-Forwarded-For or Forwarded, and set TRUSTED_PROXIES=unix and TRUSTED_PROXY_HEADER to match (lib/limit/README.md, "Caller identity"). Said once.',
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
}

// Anything thrown while starting that no check explains still ends in one sentence.
globalThis.addEventListener("unhandledrejection", onStartupRejection);
// Under `deno serve`, a stop signal that comes while this worker starts is not lost
// (lib/server/serve_stop.ts). `--listen` stops itself (lib/server/serve.ts), and so does Deno
// Deploy, whose BroadcastChannel reaches the app's other isolates.
const stopRelay = import.meta.main && !Deno.args.includes("--listen") && !onDenoDeploySafe()
  ? relayServeStop()
  : undefined;

const { config, content, onDeploy } = await configure(readEnv);
const telemetry = await startTelemetry(config, content, onDeploy);
if (telemetry) onFatalExit(() => telemetry.beforeExit());
const store = await openStore(config, { telemetry, onDeploy });
const accessLog = config.accessLog
  ? createAccessLog((chunk) => writeAll(Deno.stdout, chunk))
  : undefined;
const handler = buildHandler({ config, content, store }, accessLog);
const fetch = telemetry ? telemetry.wrapHandler(handler) : handler;

const onListen = runtimeListening(config, readEnv);
export default {
  fetch,
  /**
   * Called by `deno serve` only, in its main worker: the JSON "listening" event. Read by the runtime
   * in every worker as it takes this export, right before it wires its stop signals: once that is
   * done, the stop relay's worker is ready.
   */
  get onListen() {
    setTimeout(() => stopRelay?.ready(), 0);
    return onListen;
  },
} satisfies Deno.ServeDefaultExport;

// `deno task start` and the compiled binary pass `--listen`. Deno Deploy runs `deno run main.ts` and
// documents no serving of a default export, so there the platform itself is the signal. Under
// `deno serve`, or with DENO_AUTO_SERVE, the runtime serves the default export: listening here too
// would serve twice.
const listen = import.meta.main && !Deno.env.get("DENO_AUTO_SERVE") &&
  (Deno.args.includes("--listen") || onDeploy);
const served = await serve(fetch, {
  config,
  onDeploy,
  listen,
  main: import.meta.main,
  store,
  accessLog,
  telemetry,
});
globalThis.removeEventListener("unhandledrejection", onStartupRejection);
await served.finished;
