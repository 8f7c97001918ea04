/**
 * The service's entry point: read the configuration and content, build the handler, export it for
 * `deno serve`, and, when started with `--listen` (`deno task start`, the compiled binary) or on Deno
 * Deploy, serve it on `HOSTNAME:PORT` (or the address the runtime is given in `DENO_SERVE_ADDRESS`)
 * and shut down gracefully on SIGTERM and SIGINT.
 *
 * `deno serve` evaluates this module as the main module too and offers no way to tell it apart from
 * `deno run`, so listening is asked for explicitly, or recognised from the platform, never guessed.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { createAccessLog, writeAll } from "./lib/access_log.ts";
import { createHandler } from "./lib/handler.ts";
import {
  formatConfigErrors,
  loadConfig,
  MIN_DEPRECATION_NOTICE_DAYS,
  redactSecrets,
} from "./lib/config.ts";
import { loadContent } from "./lib/pages/content.ts";
import type { DeployEnv } from "./lib/server/deno_deploy.ts";
import { MIN_SYNC_TIMEOUT_MS, openRateLimitStore } from "./lib/limit/open_store.ts";
import { buildRoutes } from "./lib/routes.ts";
import { exitFlushBoundMs, otelSignals } from "./lib/telemetry/enabled.ts";
import { loadTelemetry } from "./lib/telemetry/load.ts";
import {
  addressOf,
  createDrain,
  DRAIN_MS,
  type ServeEvent,
  serveResilient,
  STOP_DEADLINE_MS,
} from "./lib/server/serve.ts";

const ENCODER = new TextEncoder();

/**
 * With OpenTelemetry on, events go through `console`, the only way into Deno's log exporter: each
 * becomes a log record with its level, in the request's trace when one is active, and Deno also
 * prints it (`OTEL_DENO_CONSOLE=capture`, the default: info on stdout, warn and error on stderr) or
 * not (`replace`).
 */
const EVENTS_VIA_CONSOLE = otelSignals() !== undefined;

/**
 * One operational event as a JSON line on stderr (stdout carries the access log). Written directly
 * rather than with `console.error`, whose first use loads the console (lib/README.md, "Cold
 * start"): the "listening" line comes before the first response.
 */
function event(
  level: "info" | "warn" | "error",
  message: string,
  fields: Record<string, unknown> = {},
): void {
  const line = JSON.stringify({ time: new Date().toISOString(), level, message, ...fields });
  if (EVENTS_VIA_CONSOLE) console[level](line);
  else writeAll(Deno.stderr, ENCODER.encode(`${line}\n`));
}

function errorFields(error: unknown): Record<string, unknown> {
  return {
    error: redactSecrets(
      error instanceof Error ? `${error.name}: ${error.message}` : String(error),
    ),
    stack: error instanceof Error && error.stack ? redactSecrets(error.stack) : undefined,
  };
}

function fatal(errors: string[]): never {
  console.error(formatConfigErrors(errors));
  Deno.exit(1);
}

/**
 * Logs both ends of a shared-store incident: its start (`unavailable`, `unsynced`) as a warning with
 * `started`, its end as information with `ended`, each with the store's kind and the incident's fields.
 */
function storeIncidentLogger(
  started: string,
  ended: string,
): (incident: { kind: string }) => void {
  return (incident) => {
    telemetry?.incident(incident);
    incident.kind === "unavailable" || incident.kind === "unsynced"
      ? event("warn", started, { store: config.rateLimitStore, ...incident })
      : incident.kind === "overflowing"
      ? event("warn", "rate-limit sync backlog full: admitted hits are not sent", {
        store: config.rateLimitStore,
        ...incident,
      })
      : event("info", ended, { store: config.rateLimitStore, ...incident });
  };
}

/**
 * Prints the one sentence `explain` makes of a start-up failure and exits 1: start-up failures are
 * the operator's, not a stack trace. The explanations' module is imported only then, so that a
 * start that succeeds does not load it (lib/README.md, "Cold start").
 */
async function fatalExplained(
  explain: (startup: typeof import("./lib/server/startup.ts")) => string,
): Promise<never> {
  // A store's or the runtime's own message may quote KV_PATH or REDIS_URL whole.
  console.error(redactSecrets(explain(await import("./lib/server/startup.ts"))));
  Deno.exit(1);
}

// Anything thrown while starting that no check below explains still ends in one sentence.
function onStartupRejection(event: PromiseRejectionEvent): void {
  event.preventDefault();
  void fatalExplained((startup) => startup.explainStartupError(event.reason));
}
globalThis.addEventListener("unhandledrejection", onStartupRejection);

const readEnv = (name: string) => Deno.env.get(name);

/** Whether this is Deno Deploy, the platform's environment and the configuration read from it. */
async function configure(): Promise<
  { onDeploy: boolean; platform: DeployEnv; loaded: ReturnType<typeof loadConfig> }
> {
  // Deno Deploy sets DENO_DEPLOY=true (`onDenoDeploy` in lib/server/deno_deploy.ts, tested there);
  // that module, with the platform's defaults, is imported on Deploy only (lib/README.md, "Cold
  // start").
  const onDeploy = readEnv("DENO_DEPLOY") === "true";
  const platform = onDeploy
    ? (await import("./lib/server/deno_deploy.ts")).deployEnv(readEnv)
    : { env: readEnv, errors: [] };
  return { onDeploy, platform, loaded: loadConfig(platform.env) };
}

const { onDeploy, platform, loaded } = await configure().catch((error) =>
  fatalExplained((startup) => startup.explainStartupError(error))
);
if (!loaded.ok || platform.errors.length > 0) {
  fatal([...platform.errors, ...(loaded.ok ? [] : loaded.errors)]);
}
const config = loaded.config;
if (platform.derivedBaseUrl !== undefined) {
  event("info", "PUBLIC_BASE_URL is unset: links name the Deno Deploy timeline's URL", {
    baseUrl: platform.derivedBaseUrl,
  });
}

const contentResult = loadContent(config);
if (!contentResult.ok) fatal(contentResult.errors);

// Loaded, with npm:@opentelemetry/api, only when Deno exports OpenTelemetry (OTEL_DENO=true).
const telemetry = await loadTelemetry(() => buildRoutes(config, contentResult.content).keys(), {
  storeKind: config.rateLimitStore,
  storeTimeoutMs: config.rateLimitStoreTimeoutMs,
  syncTimeoutMs: Math.max(config.rateLimitStoreTimeoutMs, MIN_SYNC_TIMEOUT_MS),
});

// Deno exports the last interval at exit, after the shutdown below: each export is bounded by
// OTEL_EXPORTER_OTLP_TIMEOUT (default 10 s), so a slow collector could hold the exit past the deadline.
if (telemetry && DRAIN_MS + exitFlushBoundMs(readEnv) > STOP_DEADLINE_MS) {
  event(
    "warn",
    'OTEL_EXPORTER_OTLP_TIMEOUT lets a slow collector hold the exit past the shutdown deadline: set it to 500 (ms) or less (deploy/README.md, "Observability")',
    { deadlineMs: STOP_DEADLINE_MS, exitFlushBoundMs: exitFlushBoundMs(readEnv) },
  );
}

const opened = await openRateLimitStore(config, {
  ...(telemetry ? { wrapStore: telemetry.wrapStore, wrapBackend: telemetry.wrapBackend } : {}),
  onCapacity: (tracked) =>
    event(
      "warn",
      "rate limiter at its caller cap: the least recently added callers are being forgotten",
      {
        tracked,
      },
    ),
  onIncident: storeIncidentLogger(
    "rate-limit store unavailable: answering by the failure policy",
    "rate-limit store recovered: limiting resumed",
  ),
  onClockOffset: (offsetMs) =>
    event(
      "warn",
      `this instance's clock is ${Math.abs(offsetMs / 1000).toFixed(1)} s ${
        offsetMs > 0 ? "behind" : "ahead of"
      } the rate-limit store's (Deno KV: another instance's stamps): fix its time synchronisation (NTP); Redis keeps the limit by its own clock, Deno KV cannot (lib/limit/README.md, "Which clock decides")`,
      { offsetMs },
    ),
  onSyncIncident: storeIncidentLogger(
    "rate-limit sync failing: each instance limits by its own log meanwhile",
    "rate-limit sync recovered: the instances' counts are reconciled",
  ),
}).catch((error) =>
  fatalExplained((startup) =>
    config.rateLimitStore === "kv"
      ? startup.explainKvError(error, config.kvPath, { onDenoDeploy: onDeploy })
      : startup.explainStartupError(error)
  )
);
const store = telemetry ? telemetry.wrapDecisions(opened) : opened;

const accessLog = config.accessLog
  ? createAccessLog((chunk) => writeAll(Deno.stdout, chunk))
  : undefined;

// Stopping ends the warm-up: its steps would only delay the requests being finished.
const warmUpStop = new AbortController();
try {
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => warmUpStop.abort());
  }
} catch {
  // No signal support here: the warm-up runs to its end.
}

const handler = createHandler({
  config,
  content: contentResult.content,
  store,
  ...(accessLog ? { accessLog: accessLog.log } : {}),
  onError: (error) => event("error", "unexpected error answered 500", errorFields(error)),
  onNoAddress: () =>
    event(
      "error",
      'a request came from a peer with no IP address (unix socket or vsock) and no forwarded client address: every such caller shares ONE rate-limit budget. Put a proxy in front that sets X-Forwarded-For or Forwarded, and set TRUSTED_PROXIES=unix and TRUSTED_PROXY_HEADER to match (lib/limit/README.md, "Caller identity"). Said once.',
    ),
  // Nothing is built before listening, so the first request is not kept waiting: each path's first
  // request builds its representations (Web Crypto ETags), and the warm-up builds the rest, pages
  // and compressed bodies included (lib/README.md, "Cold start").
  warmUp: {
    signal: warmUpStop.signal,
    onDone: ({ variants, ms }) =>
      event("info", "warmed up: every representation built", { variants, ms: Math.round(ms) }),
    onError: (error) =>
      event("error", "a representation cannot be built: its path answers 500", errorFields(error)),
  },
});

const fetch = telemetry ? telemetry.wrapHandler(handler) : handler;

export default { fetch } satisfies Deno.ServeDefaultExport;

// The spec asks for the announcement at least 90 days before removal. Start-up checks the two dates;
// whether the headers really went out that early depends on when this was first deployed.
if (
  config.sunset && config.sunset.getTime() - Date.now() < MIN_DEPRECATION_NOTICE_DAYS * 86_400_000
) {
  event(
    "warn",
    "SUNSET_DATE is less than 90 days away: the removal must have been announced (Deprecation and Sunset sent) since at least 90 days before it",
    {
      sunset: config.sunset.toISOString(),
    },
  );
}

// `deno task start` and the compiled binary pass `--listen`. Deno Deploy runs `deno run main.ts` and
// documents no serving of a default export, so there the platform itself is the signal. Under
// `deno serve`, or with DENO_AUTO_SERVE, the runtime serves the default export: listening here too
// would serve twice.
const listen = import.meta.main && !Deno.env.get("DENO_AUTO_SERVE") &&
  (Deno.args.includes("--listen") || onDeploy);

// The memory store counts for this process alone: say so at start where the service can tell that
// other processes or isolates share its callers' traffic (lib/server/shared_traffic.ts), once it
// listens (or, under `deno serve`, which evaluates this module as the main module in every worker of
// --parallel, once the workers have found each other).
const sharedTraffic =
  config.rateLimitStore === "memory" && (onDeploy || (listen && config.reusePort) || !listen)
    ? await import("./lib/server/shared_traffic.ts")
    : undefined;
/** Whether the shared-traffic warning, if any, was written (before the first "listening"). */
let sharedTrafficSaid = false;
if (sharedTraffic && import.meta.main && !listen) {
  void sharedTraffic.watchServeWorkers({
    onSeveral: (workers) =>
      event("warn", sharedTraffic.parallelWorkersWarning(workers), { workers }),
  });
}

if (!listen) {
  // The runtime owns the listener: on SIGTERM or SIGINT it finishes the requests in flight, then
  // unloads the module. Exiting at the signal would cut them short; the lines they log are written
  // at unload instead.
  globalThis.addEventListener("unload", () => accessLog?.flush());
}

if (listen) {
  const drain = createDrain();
  let server: ReturnType<typeof serveResilient>;
  try {
    server = serveResilient(drain.wrap(fetch), {
      hostname: config.hostname,
      port: config.port,
      reusePort: config.reusePort,
      onEvent: logServeEvent,
    });
  } catch (error) {
    server = await fatalExplained((startup) => startup.explainListenError(error, config));
  }

  let stopping = false;
  const stop = async (signal: Deno.Signal) => {
    if (stopping) return;
    stopping = true;
    event("info", "shutting down: finishing requests in flight", { signal });
    const deadline = setTimeout(() => {
      accessLog?.flush();
      event("warn", "shutdown overran its deadline: exiting with connections still open", {
        deadlineMs: STOP_DEADLINE_MS,
      });
      Deno.exit(0);
    }, STOP_DEADLINE_MS);
    // Keep answering for a moment with Connection: close, so that busy keep-alive clients learn to
    // stop reusing their connection before it is closed under them.
    drain.close();
    await new Promise((resolve) => setTimeout(resolve, DRAIN_MS));
    await server.shutdown();
    accessLog?.flush();
    await store.close();
    clearTimeout(deadline);
    event("info", "stopped");
    // Exit here rather than finish evaluating the module: Deno would then warn that a module with a
    // default `fetch` export was run with `deno run`, which is intended.
    Deno.exit(0);
  };
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => void stop(signal));
  }
  globalThis.removeEventListener("unhandledrejection", onStartupRejection);
  await server.finished;
}
globalThis.removeEventListener("unhandledrejection", onStartupRejection);

/** Writes the listener's events: where it listens, and each accept incident once. */
function logServeEvent(serveEvent: ServeEvent): void {
  telemetry?.listenerEvent(serveEvent);
  if (serveEvent.kind === "listening") {
    // Said once, just before the first "listening": a listener that could not start says only why.
    const warning = sharedTraffic?.sharedTrafficWarning({
      store: config.rateLimitStore,
      reusePort: config.reusePort,
      onDenoDeploy: onDeploy,
    });
    if (warning !== undefined && !sharedTrafficSaid) event("warn", warning);
    sharedTrafficSaid = true;
    event("info", "listening", {
      address: addressOf(serveEvent.addr),
      baseUrl: config.baseUrl,
    });
  } else if (serveEvent.kind === "accept_failed") {
    event(
      "warn",
      "accepting connections failed: serving the open ones and listening again when possible",
      { error: serveEvent.error },
    );
  } else {
    event("info", "accepting connections again", {
      downMs: serveEvent.downMs,
      attempts: serveEvent.attempts,
    });
  }
}
