/**
 * The service's entry point, read top to bottom: configure, open the store, build the handler,
 * export it for `deno serve`, and, when started with `--listen` (`deno task start`, the compiled
 * binary) or on Deno Deploy, serve it on `HOSTNAME:PORT` (or the address the runtime is given in
 * `DENO_SERVE_ADDRESS`) and stop gracefully on SIGTERM and SIGINT. Each step lives in `lib/server/`,
 * and what every entry does alike (events, warnings, the stop) in `lib/lifecycle/`.
 *
 * `deno serve` evaluates this module as the main module too and offers no way to tell it apart from
 * `deno run`, so listening is asked for explicitly, or recognised from the platform, never guessed.
 *
 * @module
 */

import { createAccessLog } from "./lib/access_log.ts";
import { createServiceHandler } from "./lib/lifecycle/service_handler.ts";
import { createLifecycle } from "./lib/lifecycle/stop.ts";
import { configure } from "./lib/server/configure.ts";
import { onStartupRejection, STDOUT_LINES, useDenoEvents } from "./lib/server/events.ts";
import { runtimeListening, serveExport } from "./lib/server/runtime_serve.ts";
import { serve } from "./lib/server/serve.ts";
import { relayWhenServed } from "./lib/server/serve_stop.ts";
import { openStore } from "./lib/server/store.ts";
import { startTelemetry } from "./lib/server/telemetry_start.ts";

const readEnv = (name: string) => Deno.env.get(name);

useDenoEvents();
// Anything thrown while starting that no check explains still ends in one sentence.
globalThis.addEventListener("unhandledrejection", onStartupRejection);
// Under `deno serve`, a stop signal that comes while this worker starts is not lost.
const stopRelay = relayWhenServed(import.meta.main);
const lifecycle = createLifecycle();

const { config, content, onDeploy } = await configure(readEnv);
const telemetry = await startTelemetry({ config, content, onDeploy }, readEnv);
const store = await openStore(config, { telemetry, onDeploy });
const accessLog = config.accessLog
  ? createAccessLog((chunk) => STDOUT_LINES.write(chunk))
  : undefined;
const handler = createServiceHandler({
  config,
  content,
  store,
  accessLog,
  lifecycle,
  noAddress:
    'a request came from a peer with no IP address (unix socket or vsock) and no forwarded client address: every such caller shares ONE rate-limit budget. Put a proxy in front that sets X-Forwarded-For or Forwarded, and set TRUSTED_PROXIES=unix and TRUSTED_PROXY_HEADER to match (lib/limit/README.md, "Caller identity"). Said once.',
});
const fetch = telemetry ? telemetry.wrapHandler(handler) : handler;

export default serveExport(
  fetch,
  runtimeListening(config, readEnv, lifecycle),
  stopRelay,
) satisfies Deno.ServeDefaultExport;

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
  lifecycle,
});
globalThis.removeEventListener("unhandledrejection", onStartupRejection);
await served.finished;
