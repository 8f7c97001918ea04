/**
 * The rate-limit store the process opens (`lib/limit/open_store.ts`), with the operator's events
 * for its incidents and, when OpenTelemetry is on, its instruments; a store that cannot open ends
 * the start in one sentence.
 *
 * @module
 */

import type { Config } from "../config.ts";
import type { RateLimitStore } from "../limit/decision.ts";
import { openRateLimitStore } from "../limit/open_store.ts";
import type { Telemetry } from "../telemetry/load.ts";
import { event, fatalExplained } from "./events.ts";

/**
 * Opens the store `config` names, its incidents logged (and counted by `telemetry`); exits 1 with
 * one sentence when it cannot open (a KV path, a Redis URL...).
 */
export async function openStore(
  config: Config,
  options: { telemetry: Telemetry | undefined; onDeploy: boolean },
): Promise<RateLimitStore> {
  const { telemetry } = options;
  const incidents = (started: string, ended: string) => (incident: { kind: string }) => {
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
  const opened = await openRateLimitStore(config, {
    ...(telemetry ? { wrapStore: telemetry.wrapStore, wrapBackend: telemetry.wrapBackend } : {}),
    onCapacity: (tracked) =>
      event(
        "warn",
        "rate limiter at its caller cap: the least recently added callers are being forgotten",
        { tracked },
      ),
    onIncident: incidents(
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
    onSyncIncident: incidents(
      "rate-limit sync failing: each instance limits by its own log meanwhile",
      "rate-limit sync recovered: the instances' counts are reconciled",
    ),
  }).catch((error) =>
    fatalExplained((startup) =>
      config.rateLimitStore === "kv"
        ? startup.explainKvError(error, config.kvPath, { onDenoDeploy: options.onDeploy })
        : startup.explainStartupError(error)
    )
  );
  return telemetry ? telemetry.wrapDecisions(opened) : opened;
}
