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

/** One operational event as a JSON line on stderr (stdout carries the access log). */
function event(
  level: "info" | "warn" | "error",
  message: string,
  fields: Record<string, unknown> = {},
): void {
  console.error(JSON.stringify({ time: new Date().toISOString(), level, message, ...fields }));
}

function errorFields(error: unknown): Record<string, unknown> {
  return {
    error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
    stack: error instanceof Error ? error.stack : undefined,
  };
}

function fatal(errors: string[]): never {
  console.error(formatConfigErrors(errors));
  Deno.exit(1);
}

const loaded = loadConfig(denoEnv());
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
});

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

const fetch = createHandler({
  config,
  content: contentResult.content,
  store,
  ...(accessLog ? { accessLog: accessLog.log } : {}),
  onError: (error) => event("error", "unexpected error answered 500", errorFields(error)),
  onNoAddress: () =>
    event(
      "error",
      'a request came from a peer with no IP address (unix socket or vsock) and no forwarded client address: every such caller shares ONE rate-limit budget. Put a proxy in front that sets X-Forwarded-For or Forwarded, and set TRUSTED_PROXIES=unix and TRUSTED_PROXY_HEADER to match (README, "Caller identity"). Said once.',
    ),
  // Pages and compressed bodies are built after listening, so the first request is not kept waiting.
  warmUp: {
    signal: warmUpStop.signal,
    onDone: ({ variants, ms }) =>
      event("info", "warmed up: every representation built", { variants, ms: Math.round(ms) }),
    onError: (error) =>
      event("error", "a representation cannot be built: its path answers 500", errorFields(error)),
  },
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
  let server: Deno.HttpServer<Deno.NetAddr>;
  try {
    server = Deno.serve({
      port: config.port,
      hostname: config.hostname,
      onListen: ({ hostname, port }) =>
        event("info", "listening", {
          address: `http://${hostname.includes(":") ? `[${hostname}]` : hostname}:${port}/`,
          baseUrl: config.baseUrl,
        }),
    }, fetch);
  } catch (error) {
    // A taken port or a port this user may not bind is an operator's problem, not a stack trace.
    console.error(
      `Cannot listen on ${config.hostname}:${config.port}: ${
        error instanceof Error ? error.message : String(error)
      }; nothing is served.`,
    );
    Deno.exit(1);
  }

  let stopping = false;
  const stop = async (signal: Deno.Signal) => {
    if (stopping) return;
    stopping = true;
    event("info", "shutting down: finishing requests in flight", { signal });
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
  await server.finished;
}
