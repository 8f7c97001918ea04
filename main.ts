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
import { createHandler } from "./lib/app.ts";
import { formatConfigErrors, loadConfig, MIN_DEPRECATION_NOTICE_DAYS } from "./lib/config.ts";
import { loadContent } from "./lib/content.ts";
import { deployEnv, onDenoDeploy } from "./lib/deploy.ts";
import { openRateLimitStore } from "./lib/rate_limit_store.ts";

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

const platform = deployEnv((name) => Deno.env.get(name));
const loaded = loadConfig(platform.env);
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

// `deno task start` and the compiled binary pass `--listen`. Deno Deploy runs `deno run main.ts` and
// documents no serving of a default export, so there the platform itself is the signal. Under
// `deno serve`, or with DENO_AUTO_SERVE, the runtime serves the default export: listening here too
// would serve twice.
const listen = import.meta.main && !Deno.env.get("DENO_AUTO_SERVE") &&
  (Deno.args.includes("--listen") || onDenoDeploy((name) => Deno.env.get(name)));

if (!listen) {
  // The runtime owns the listener: on SIGTERM or SIGINT it finishes the requests in flight, then
  // unloads the module. Exiting at the signal would cut them short; the lines they log are written
  // at unload instead.
  globalThis.addEventListener("unload", () => accessLog?.flush());
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
