/**
 * The service's entry point: read the configuration and content, build the handler, export it for
 * `deno serve` and Deno Deploy, and, when started with `--listen` (`deno task start`, the compiled
 * binary), serve it on `HOSTNAME:PORT` and shut down gracefully on SIGTERM and SIGINT.
 *
 * `deno serve` evaluates this module as the main module too and offers no way to tell it apart from
 * `deno run`, so listening is asked for explicitly rather than guessed.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { createAccessLog, writeAll } from "./lib/access_log.ts";
import { createHandler } from "./lib/app.ts";
import {
  denoEnv,
  formatConfigErrors,
  loadConfig,
  MIN_DEPRECATION_NOTICE_DAYS,
} from "./lib/config.ts";
import { loadContent } from "./lib/content.ts";
import { openRateLimitStore } from "./lib/rate_limit_store.ts";
import { createDrain, DRAIN_MS, type ServeEvent, serveResilient } from "./lib/serve.ts";
import { explainKvError, explainListenError, explainStartupError } from "./lib/startup.ts";

/** One operational event as a JSON line on stderr (stdout carries the access log). */
function event(
  level: "info" | "warn" | "error",
  message: string,
  fields: Record<string, unknown> = {},
): void {
  console.error(JSON.stringify({ time: new Date().toISOString(), level, message, ...fields }));
}

function fatal(errors: string[]): never {
  console.error(formatConfigErrors(errors));
  Deno.exit(1);
}

/** Prints one sentence and exits 1: start-up failures are the operator's, not a stack trace. */
function fatalSentence(sentence: string): never {
  console.error(sentence);
  Deno.exit(1);
}

// Anything thrown while starting that no check below explains still ends in one sentence.
function onStartupRejection(event: PromiseRejectionEvent): void {
  event.preventDefault();
  fatalSentence(explainStartupError(event.reason));
}
globalThis.addEventListener("unhandledrejection", onStartupRejection);

let loaded: ReturnType<typeof loadConfig>;
try {
  loaded = loadConfig(denoEnv());
} catch (error) {
  fatalSentence(explainStartupError(error));
}
if (!loaded.ok) fatal(loaded.errors);
const config = loaded.config;

const contentResult = loadContent(config);
if (!contentResult.ok) fatal(contentResult.errors);

const store = await openRateLimitStore(config, {
  onCapacity: (tracked) =>
    event(
      "warn",
      "rate limiter at its caller cap: the least recently added callers are being forgotten",
      {
        tracked,
      },
    ),
  onIncident: (incident) =>
    incident.kind === "unavailable"
      ? event("warn", "rate-limit store unavailable: answering by the failure policy", {
        store: config.rateLimitStore,
        ...incident,
      })
      : event("info", "rate-limit store recovered: limiting resumed", {
        store: config.rateLimitStore,
        ...incident,
      }),
}).catch((error) =>
  fatalSentence(
    config.rateLimitStore === "kv"
      ? explainKvError(error, config.kvPath)
      : explainStartupError(error),
  )
);

const accessLog = config.accessLog
  ? createAccessLog((chunk) => writeAll(Deno.stdout, chunk))
  : undefined;

const fetch = createHandler({
  config,
  content: contentResult.content,
  store,
  ...(accessLog ? { accessLog: accessLog.log } : {}),
  onError: (error) =>
    event("error", "unexpected error answered 500", {
      error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
      stack: error instanceof Error ? error.stack : undefined,
    }),
});

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

const listen = import.meta.main && Deno.args.includes("--listen");

if (!listen) {
  // Under `deno serve` (or an embedding server) the runtime owns the listener; still, lines waiting
  // in the access log must not be lost when the process is told to stop. Deno Deploy has no signals.
  try {
    for (const signal of ["SIGTERM", "SIGINT"] as const) {
      Deno.addSignalListener(signal, () => {
        accessLog?.flush();
        Deno.exit(0);
      });
    }
  } catch {
    // No signal support here: the log is flushed every 250 ms regardless.
  }
}

if (listen) {
  const drain = createDrain();
  let server: ReturnType<typeof serveResilient>;
  try {
    server = serveResilient(drain.wrap(fetch), {
      hostname: config.hostname,
      port: config.port,
      onEvent: logServeEvent,
    });
  } catch (error) {
    fatalSentence(explainListenError(error, config));
  }

  let stopping = false;
  const stop = async (signal: Deno.Signal) => {
    if (stopping) return;
    stopping = true;
    event("info", "shutting down: finishing requests in flight", { signal });
    // Keep answering for a moment with Connection: close, so that busy keep-alive clients learn to
    // stop reusing their connection before it is closed under them.
    drain.close();
    await new Promise((resolve) => setTimeout(resolve, DRAIN_MS));
    await server.shutdown();
    accessLog?.flush();
    await store.close();
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
  if (serveEvent.kind === "listening") {
    const { hostname, port } = serveEvent.addr;
    event("info", "listening", {
      address: `http://${hostname.includes(":") ? `[${hostname}]` : hostname}:${port}/`,
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
