/**
 * The service's telemetry on Deno, loaded (with `npm:@opentelemetry/api`) only when the runtime
 * exports OpenTelemetry (`OTEL_DENO=true`: `lib/telemetry/enabled.ts`), with its start-up warnings
 * (`lib/lifecycle/warnings.ts`) and the bound of a failed start's exit.
 *
 * @module
 */

import type { Config } from "../config/config.ts";
import { MIN_SYNC_TIMEOUT_MS } from "../limit/open_store.ts";
import { DRAIN_MS, STOP_DEADLINE_MS } from "../lifecycle/stop.ts";
import { otelExitWarning, otelStartWarnings, warn } from "../lifecycle/warnings.ts";
import type { Content } from "../pages/content.ts";
import { buildAnswers } from "../respond/paths.ts";
import { exitFlushBoundMs } from "../telemetry/enabled.ts";
import { loadTelemetry, type Telemetry } from "../telemetry/load.ts";
import { onFatalExit } from "./events.ts";

/**
 * The service's telemetry, or undefined when the runtime exports nothing; its warnings said.
 *
 * @param readEnv the environment, as the runtime reads `OTEL_*` (none on Deno Deploy)
 */
export async function startTelemetry(
  started: { config: Config; content: Content; onDeploy: boolean },
  readEnv: (name: string) => string | undefined,
): Promise<Telemetry | undefined> {
  const { config, content } = started;
  const telemetry = await loadTelemetry(() => buildAnswers(config, content).paths.keys(), {
    storeKind: config.rateLimitStore,
    storeTimeoutMs: config.rateLimitStoreTimeoutMs,
    syncTimeoutMs: Math.max(config.rateLimitStoreTimeoutMs, MIN_SYNC_TIMEOUT_MS),
  });
  if (!telemetry) return undefined;
  onFatalExit(() => telemetry.beforeExit());
  // Deno exports the last interval at exit, after the shutdown: each export is bounded by
  // OTEL_EXPORTER_OTLP_TIMEOUT (default 10 s), so a slow collector could hold the exit past the
  // deadline.
  if (DRAIN_MS + exitFlushBoundMs(readEnv) > STOP_DEADLINE_MS) {
    warn(otelExitWarning(STOP_DEADLINE_MS, exitFlushBoundMs(readEnv)));
  }
  // Deno Deploy takes no OTEL_* variable: nothing there to set.
  if (!started.onDeploy) otelStartWarnings(readEnv).forEach(warn);
  return telemetry;
}
