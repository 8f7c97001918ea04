/**
 * Loads the service's OpenTelemetry instruments (`otel.ts`, and with it `npm:@opentelemetry/api`)
 * only when Deno's exporter is on. Off (`OTEL_DENO` unset), nothing is imported and every caller
 * gets `undefined`: the handler and the stores are then exactly what they are without telemetry.
 *
 * @module
 */

import { otelSignals } from "./enabled.ts";
import type { Telemetry, TelemetryOptions } from "./otel.ts";

export type { Telemetry } from "./otel.ts";

/**
 * The service's telemetry when the runtime exports OpenTelemetry, else `undefined` (nothing loaded).
 *
 * @param paths every path the service serves, asked for only when telemetry is on
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * // `deno test` runs without OTEL_DENO here: off, and @opentelemetry/api is not imported.
 * const telemetry = await loadTelemetry(() => ["/"], {
 *   storeKind: "memory",
 *   storeTimeoutMs: 100,
 *   syncTimeoutMs: 5000,
 * });
 * assert.equal(telemetry, undefined);
 * ```
 */
export async function loadTelemetry(
  paths: () => Iterable<string>,
  options: Omit<TelemetryOptions, "paths">,
): Promise<Telemetry | undefined> {
  if (otelSignals() === undefined) return undefined;
  const { createTelemetry } = await import("./otel.ts");
  return createTelemetry({ ...options, paths: paths() });
}
