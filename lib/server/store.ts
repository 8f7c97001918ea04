/**
 * The rate-limit store the process opens (`lib/limit/open_store.ts`), with the operator's events
 * for its incidents (`lib/store_events.ts`, Node's entry writes the same) and, when OpenTelemetry is on, its instruments; a store that cannot open ends
 * the start in one sentence.
 *
 * @module
 */

import type { Config } from "../config/config.ts";
import type { RateLimitStore } from "../limit/core/decision.ts";
import { openRateLimitStore } from "../limit/open_store.ts";
import { isSqliteOpenFailure } from "../limit/sqlite/open_failure.ts";
import { CALLER_EXEMPT, createCallerVerdict } from "../limit/caller/caller_controls.ts";
import { parseCidrSet } from "../http/address.ts";
import { storeEventOptions } from "../store_events.ts";
import type { Telemetry } from "../telemetry/load.ts";
import { event } from "../lifecycle/events.ts";
import { fatalExplained } from "./events.ts";

/**
 * Opens the store `config` names, its incidents logged (and counted by `telemetry`); exits 1 with
 * one sentence when it cannot open (a KV path, a Redis URL...).
 */
export async function openStore(
  config: Config,
  options: { telemetry: Telemetry | undefined; onDeploy: boolean },
): Promise<RateLimitStore> {
  const { telemetry } = options;
  const opened = await openRateLimitStore(config, {
    ...(telemetry ? { wrapStore: telemetry.wrapStore, wrapHitLog: telemetry.wrapHitLog } : {}),
    ...storeEventOptions(
      config,
      event,
      telemetry && ((reported) => telemetry.incident(reported)),
    ),
  }).catch((error) =>
    fatalExplained((startup) =>
      config.rateLimitStore === "kv"
        ? startup.explainKvError(error, config.kvPath, { onDenoDeploy: options.onDeploy })
        : isSqliteOpenFailure(error)
        ? `${error.message}; nothing is served.`
        : startup.explainStartupError(error)
    )
  );
  if (!telemetry) return opened;
  // The decisions metric tells the refusals the handler serves apart (lib/handler.ts).
  const verdict = createCallerVerdict(config.rateLimitExempt, parseCidrSet("").set);
  return telemetry.wrapDecisions(opened, {
    report: config.rateLimitMode === "report",
    ...(verdict ? { exempt: (key: string) => verdict(key) === CALLER_EXEMPT } : {}),
  });
}
