/**
 * The operator port on Node (`HEALTH_PORT` with `npm start`): `/livez` and `/readyz`
 * (`lib/lifecycle/health.ts`) on a `node:http` server of their own, on `HOSTNAME`. It reads only
 * the method and the target, bounds a request's head as tightly as a probe needs, keeps listening
 * when accepting fails (EMFILE: Node reports each as the server's `error` event, reported once per
 * incident here), and never keeps the process alive (the stop ends it with the process). Nothing
 * of it reaches the service's handler: a probe is never counted or logged in the access log.
 *
 * @module
 */

import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Config } from "../config/config.ts";
import { pathOf } from "../http/message.ts";
import { healthAnswer, logHealthListenerEvent } from "../lifecycle/health.ts";
import { createAcceptIncidents } from "../lifecycle/listener_events.ts";
import type { Lifecycle } from "../lifecycle/stop.ts";

/** The largest head a probe may send, in bytes: a probe's is a few hundred. */
const MAX_PROBE_HEAD_BYTES = 8 * 1024;

/**
 * How long a probe's head, and the whole probe, may take, in ms: a kubelet's default probe
 * timeout is 1 s; a connection that sends nothing is closed instead of held.
 */
const PROBE_TIMEOUT_MS = 5_000;

/** How long an idle probe connection is kept, in ms (Node's default). */
const PROBE_KEEP_ALIVE_MS = 5_000;

/**
 * Serves the operator port on `config.healthPort`, answering from `lifecycle`'s phase; rejects
 * with Node's error when it cannot listen (for the entry to say in one sentence).
 */
export async function serveHealthNode(
  lifecycle: Lifecycle,
  config: Pick<Config, "hostname" | "healthPort" | "reusePort">,
): Promise<Server> {
  const server = createServer({
    maxHeaderSize: MAX_PROBE_HEAD_BYTES,
    headersTimeout: PROBE_TIMEOUT_MS,
    requestTimeout: PROBE_TIMEOUT_MS,
    keepAliveTimeout: PROBE_KEEP_ALIVE_MS,
    // A probe is answered by its method and path alone (HAProxy's default check names no host).
    requireHostHeader: false,
  }, (req, res) => {
    const target = req.url ?? "/";
    // Origin form (`/readyz?x`) up to its query; the absolute form (`http://host/readyz`) parsed.
    const path = target.startsWith("/") ? target.split(/[?#]/, 1)[0]! : pathOf(target);
    const answer = healthAnswer(req.method ?? "GET", path, lifecycle.phase);
    res.writeHead(answer.status, answer.headers.flat());
    res.end(answer.body);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({
      host: config.hostname,
      port: config.healthPort ?? 0,
      ...(config.reusePort ? { reusePort: true } : {}),
    }, () => {
      server.off("error", reject);
      resolve();
    });
  });
  server.unref();
  const incidents = createAcceptIncidents(logHealthListenerEvent);
  server.on("error", (error) => incidents.failed(error));
  server.on("connection", () => incidents.accepting());
  const bound = server.address() as AddressInfo;
  const host = bound.family === "IPv6" ? `[${bound.address}]` : bound.address;
  logHealthListenerEvent({ kind: "listening", address: `http://${host}:${bound.port}/` });
  return server;
}
