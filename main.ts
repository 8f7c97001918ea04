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
import { denoEnv, formatConfigErrors, loadConfig } from "./lib/config.ts";
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

if (import.meta.main && Deno.args.includes("--listen")) {
  const server = Deno.serve({
    port: config.port,
    hostname: config.hostname,
    onListen: ({ hostname, port }) =>
      event("info", "listening", {
        address: `http://${hostname.includes(":") ? `[${hostname}]` : hostname}:${port}/`,
        baseUrl: config.baseUrl,
      }),
  }, fetch);

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
