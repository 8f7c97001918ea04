/**
 * The operator port's answers (`HEALTH_PORT`), whatever the runtime: `/livez` (the process answers)
 * and `/readyz` (it is serving: 503 while it starts and from the moment a stop begins, so that a
 * load balancer or Kubernetes takes it out before the drain ends), for an orchestrator's probes,
 * never counted against a caller and never on the public port. Each entry serves them on a
 * listener of its own (`lib/server/health_listener.ts`, `lib/node/health_listener.ts`).
 *
 * Readiness follows the process's phase only, not the rate-limit store: the store is shared by
 * every instance, so an outage reaches all of them at once, and readiness failing on it would take
 * every instance out of the load balancer together, while the failure policy still answers each
 * caller (`open` admits, `closed` refuses with its own 429 and `Retry-After`). An instance that
 * cannot reach its store is as ready as any other; the breaker's events and metrics say the outage
 * (deploy/README.md, "Probes").
 *
 * Every answer is a small JSON body built once: the method and the path are all that is read (no
 * `Host`, no other field, the query ignored), so a probe costs what a lookup costs.
 *
 * @module
 */

import { STATUS } from "../http/message.ts";
import { event } from "./events.ts";
import type { ListenerEvent } from "./listener_events.ts";
import type { Phase } from "./stop.ts";

/** The status of `/readyz` while the process is not serving: 503 Service Unavailable. */
const NOT_READY = 503;

/** The methods the operator port answers; any other is 405 with this `Allow`. */
const ALLOW = "GET, HEAD";

/** An answer of the operator port: its status, fields and body (none for HEAD). */
export interface HealthAnswer {
  /** HTTP status. */
  status: number;
  /** Header fields, lower-case names, in the order they are sent (`content-length` included). */
  headers: Array<[string, string]>;
  /** The body, or undefined for HEAD. */
  body: Uint8Array<ArrayBuffer> | undefined;
}

const ENCODER = new TextEncoder();

/** A JSON answer's status and body; its fields follow from them. */
interface Built {
  status: number;
  body: Uint8Array<ArrayBuffer>;
  allow?: string;
}

/** Every answer's body, built once: a probe builds nothing. */
const ANSWERS = {
  live: json(STATUS.OK, { status: "live" }),
  ready: json(STATUS.OK, { status: "ready", phase: "serving" }),
  starting: json(NOT_READY, { status: "not_ready", phase: "starting" }),
  stopping: json(NOT_READY, { status: "not_ready", phase: "stopping" }),
  notFound: json(STATUS.NotFound, {
    error: {
      code: "not_found",
      message: "The operator port answers /livez and /readyz only.",
      hint: "Probe GET /livez (the process answers) or GET /readyz (it serves).",
    },
  }),
  methodNotAllowed: {
    ...json(STATUS.MethodNotAllowed, {
      error: {
        code: "method_not_allowed",
        message: "The operator port answers GET and HEAD only.",
        hint: "Probe with GET or HEAD.",
      },
    }),
    allow: ALLOW,
  },
} satisfies Record<string, Built>;

function json(status: number, body: unknown): Built {
  return { status, body: ENCODER.encode(JSON.stringify(body)) };
}

/**
 * The operator port's answer to `method` on `path` (without its query) in `phase`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(healthAnswer("GET", "/livez", "stopping").status, 200);
 * assert.equal(healthAnswer("GET", "/readyz", "serving").status, 200);
 * assert.equal(healthAnswer("GET", "/readyz", "stopping").status, 503);
 * assert.equal(healthAnswer("HEAD", "/readyz", "serving").body, undefined);
 * assert.equal(healthAnswer("POST", "/readyz", "serving").status, 405);
 * assert.equal(healthAnswer("GET", "/api/v1/platform", "serving").status, 404);
 * ```
 */
export function healthAnswer(method: string, path: string, phase: Phase): HealthAnswer {
  let built: Built;
  if (path !== "/livez" && path !== "/readyz") built = ANSWERS.notFound;
  else if (method !== "GET" && method !== "HEAD") built = ANSWERS.methodNotAllowed;
  else if (path === "/livez") built = ANSWERS.live;
  else built = phase === "serving" ? ANSWERS.ready : ANSWERS[phase];
  const headers: Array<[string, string]> = [
    ["content-type", "application/json"],
    // A probe's answer is now's, never a cache's.
    ["cache-control", "no-store"],
    ["content-length", String(built.body.length)],
  ];
  if (built.allow !== undefined) headers.push(["allow", built.allow]);
  return { status: built.status, headers, body: method === "HEAD" ? undefined : built.body };
}

/**
 * Writes the operator port's listener events: where it listens (`health port listening`, apart from
 * the public port's `listening`), and its accept incidents, marked `"listener":"health"`.
 */
export function logHealthListenerEvent(listenerEvent: ListenerEvent): void {
  if (listenerEvent.kind === "listening") {
    event("info", "health port listening", {
      address: listenerEvent.address,
      paths: ["/livez", "/readyz"],
    });
  } else if (listenerEvent.kind === "accept_failed") {
    event("warn", "the health port's accepting failed: probes are answered again once it accepts", {
      listener: "health",
      error: listenerEvent.error,
    });
  } else {
    event("info", "the health port accepts connections again", {
      listener: "health",
      downMs: listenerEvent.downMs,
      attempts: listenerEvent.attempts,
    });
  }
}
