/**
 * The operator port on Deno (`HEALTH_PORT` with `main.ts --listen`: `deno task start`, the compiled
 * binary): `/livez` and `/readyz` (`lib/lifecycle/health.ts`) on a listener of their own, on
 * `HOSTNAME`, which survives running out of descriptors as the public one does (`listener.ts`) and
 * never keeps the process alive (the stop ends it with the process). Nothing of it reaches the
 * service's handler: a probe is never counted, logged in the access log or traced.
 *
 * @module
 */

import type { Config } from "../config/config.ts";
import { requestPathOf } from "../http/message.ts";
import { healthAnswer, logHealthListenerEvent } from "../lifecycle/health.ts";
import type { Lifecycle } from "../lifecycle/stop.ts";
import { fatalExplained } from "./events.ts";
import { type ResilientServer, serveResilient } from "./listener.ts";

/**
 * Serves the operator port on `config.healthPort`, answering from `lifecycle`'s phase; exits 1 with
 * one sentence naming `HEALTH_PORT` when it cannot listen.
 */
export async function serveHealth(
  lifecycle: Lifecycle,
  config: Pick<Config, "hostname" | "healthPort" | "reusePort">,
): Promise<ResilientServer> {
  const port = config.healthPort ?? 0;
  const handler = (request: Request) => {
    const path = requestPathOf(request.url, request.headers.get("host"));
    const answer = healthAnswer(request.method, path, lifecycle.phase);
    return new Response(answer.body ?? null, { status: answer.status, headers: answer.headers });
  };
  try {
    return serveResilient(handler, {
      hostname: config.hostname,
      port,
      reusePort: config.reusePort,
      onEvent: logHealthListenerEvent,
      unref: true,
    });
  } catch (error) {
    return await fatalExplained((startup) =>
      startup.explainListenError(error, {
        hostname: config.hostname,
        port,
        portVariable: "HEALTH_PORT",
      })
    );
  }
}
