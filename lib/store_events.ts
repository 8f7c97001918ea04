/**
 * The rate-limit store's events, whatever the runtime: the options of `openRateLimitStore`
 * (`lib/limit/open_store.ts`) that tell the operator of its incidents (an outage, a sync failing, the
 * caller cap, a clock off, entries of the hit log not trusted), written by the entry's `event`
 * (Deno's `lib/server/store.ts`, Node's `lib/node/store.ts`).
 *
 * @module
 */

import { type Config } from "./config/config.ts";
import { redactSecrets } from "./config/messages.ts";
import type { OpenStoreOptions } from "./limit/open_store.ts";
import type { ClockVerdict } from "./limit/clock/peer_clocks.ts";

/** Writes one operational event (a JSON line on stderr, in every entry). */
export type EventWriter = (
  level: "info" | "warn" | "error",
  message: string,
  fields?: Record<string, unknown>,
) => void;

/**
 * The event options of `openRateLimitStore` for `config`'s store, each incident also given to
 * `onReported` (telemetry counts them) before it is written, secrets redacted, by `event`.
 */
export function storeEventOptions(
  config: Config,
  event: EventWriter,
  onReported?: (reported: { kind: string }) => void,
): Pick<
  OpenStoreOptions,
  "onCapacity" | "onIncident" | "onClockOffset" | "onSyncIncident" | "onStoreRefusedCredentials"
> {
  const incidents = (started: string, ended: string) => (reported: { kind: string }) => {
    onReported?.(reported);
    // An error's text may quote a URL with its password, as any other error's (`errorFields`).
    const incident = redacted(reported);
    if (incident.kind === "untrusted" || incident.kind === "trusted" || incident.kind === "clock") {
      return untrusted(config, incident, event);
    }
    incident.kind === "unavailable" || incident.kind === "unsynced"
      ? event("warn", started, { store: config.rateLimitStore, ...incident })
      : incident.kind === "overflowing"
      ? event("warn", "rate-limit sync backlog full: admitted hits are not sent", {
        store: config.rateLimitStore,
        ...incident,
      })
      : event("info", ended, { store: config.rateLimitStore, ...incident });
  };
  return {
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
    // The operator's mistake, named at once (as start-up does), not left to pass for an outage.
    onStoreRefusedCredentials: (refused) =>
      refused === undefined
        ? event("info", "Redis accepts the credentials in REDIS_URL again", {
          store: config.rateLimitStore,
        })
        : event("error", redactSecrets(refused), { store: config.rateLimitStore }),
    onSyncIncident: incidents(
      "rate-limit sync failing: each instance limits by its own log meanwhile",
      "rate-limit sync recovered: the instances' counts are reconciled",
    ),
  };
}

/** The incident with every string field's secrets redacted. */
function redacted<T extends { kind: string }>(incident: T): T {
  return Object.fromEntries(
    Object.entries(incident).map(([key, value]) => [
      key,
      typeof value === "string" ? redactSecrets(value) : value,
    ]),
  ) as T;
}

/** The events of what `local-first`'s hit log held that it could not trust (`lib/limit/local_first/local_first_store.ts`). */
function untrusted(
  config: Config,
  incident: Record<string, unknown> & { kind: string },
  event: EventWriter,
): void {
  const store = config.rateLimitStore;
  if (incident.kind === "untrusted") {
    event(
      "warn",
      'rate-limit hit log: entries not trusted, skipped or clamped (lib/limit/README.md, "Who can write the log")',
      { store, ...incident },
    );
  } else if (incident.kind === "trusted") {
    event("info", "rate-limit hit log: a window without such entries", { store, ...incident });
  } else {
    const verdict = incident.verdict as ClockVerdict;
    const seconds = (ms: number) => `${Math.abs(ms / 1000).toFixed(1)} s`;
    const message = verdict.kind === "agree"
      ? "rate-limit peers' clocks agree again"
      : verdict.kind === "self"
      ? `this instance's clock is ${seconds(verdict.offsetMs)} ${
        verdict.offsetMs > 0 ? "ahead of" : "behind"
      } ${verdict.outvotedBy} of its ${verdict.peers} peers': fix its time synchronisation (NTP)`
      : verdict.kind === "peer"
      ? `another instance's clock disagrees with this one's and the majority's (${
        verdict.peers.map((p) =>
          `${p.instance}: ${seconds(p.offsetMs)} ${p.offsetMs > 0 ? "ahead" : "behind"}`
        ).join(", ")
      }): fix its time synchronisation (NTP); its hits in the future are counted at now`
      : `an instance's clock and this one's disagree (${
        verdict.peers.map((p) =>
          `${p.instance}: ${seconds(p.offsetMs)} ${p.offsetMs > 0 ? "ahead" : "behind"}`
        ).join(", ")
      }), and no majority tells which is wrong: check both instances' time synchronisation (NTP)`;
    event(verdict.kind === "agree" ? "info" : "warn", message, { store, verdict });
  }
}
