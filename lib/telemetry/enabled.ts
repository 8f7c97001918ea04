/**
 * Whether Deno's OpenTelemetry exporter is on in this process, read without loading anything.
 *
 * The runtime decides at start (`OTEL_DENO=true`, or `OTEL_DENO_METRICS` / `OTEL_DENO_TRACING`; for a
 * compiled binary, when it was compiled) and then registers its providers under the global symbol
 * that `npm:@opentelemetry/api` looks for (ext/telemetry/telemetry.ts, `bootstrap`). Reading that
 * symbol costs nothing, needs no `--allow-env`, and agrees with the runtime however it was switched
 * on, so the service imports `@opentelemetry/api` (`otel.ts`) only when the runtime will export.
 *
 * @module
 */

/** The global under which the runtime registers its OpenTelemetry providers. */
const OTEL_API_GLOBAL = Symbol.for("opentelemetry.js.api.1");

/** What the runtime registered: `metrics` and `trace` are present when each is on. */
interface RegisteredApi {
  metrics?: unknown;
  trace?: unknown;
}

/** Which of Deno's OpenTelemetry signals are on. */
export interface OtelSignals {
  /** Metrics are exported (`OTEL_DENO_METRICS`, on with `OTEL_DENO`). */
  metrics: boolean;
  /** Spans are exported (`OTEL_DENO_TRACING`, on with `OTEL_DENO`). */
  traces: boolean;
}

/**
 * The OpenTelemetry signals the runtime exports, or `undefined` when it exports none (`OTEL_DENO`
 * unset): then nothing of the service's telemetry is loaded.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * // `deno test` runs without OTEL_DENO here: nothing is registered.
 * assert.equal(otelSignals(), undefined);
 * ```
 */
export function otelSignals(): OtelSignals | undefined {
  const api = (globalThis as Record<symbol, RegisteredApi | undefined>)[OTEL_API_GLOBAL];
  if (api === undefined) return undefined;
  const signals = { metrics: api.metrics !== undefined, traces: api.trace !== undefined };
  return signals.metrics || signals.traces ? signals : undefined;
}

/** Deno's default bound on one OTLP export, in ms (ext/telemetry/lib.rs). */
const DEFAULT_OTLP_TIMEOUT_MS = 10_000;

/**
 * The longest the exit may wait for the last exports, in ms: at exit Deno shuts its span, log and
 * meter exporters down one after the other, each export bounded by `OTEL_EXPORTER_OTLP_TIMEOUT`
 * (ms, default 10 s), so a collector that accepts and never answers holds the exit three times that.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(exitFlushBoundMs(() => "500"), 1500);
 * assert.equal(exitFlushBoundMs(() => undefined), 30_000);
 * ```
 */
export function exitFlushBoundMs(env: (name: string) => string | undefined): number {
  const value = Number(env("OTEL_EXPORTER_OTLP_TIMEOUT"));
  const timeout = Number.isInteger(value) && value > 0 ? value : DEFAULT_OTLP_TIMEOUT_MS;
  return 3 * timeout;
}

/**
 * What Deno does with `console` while it exports (`OTEL_DENO_CONSOLE`, read by the runtime at start:
 * cli/args/flags.rs): `capture` (the default with `OTEL_DENO`) prints and exports, `replace`
 * exports only, `ignore` prints only. Read from `env` as the runtime reads it (exact values). Unset,
 * or not readable (the compiled binary fixes the mode when compiled; Deno Deploy's platform exports
 * without `OTEL_*` variables), it counts as `capture`: events then go through `console` as they
 * always did, and the platform's or the binary's own setting decides what is printed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(otelConsoleMode(() => undefined), "capture");
 * assert.equal(otelConsoleMode((name) => name === "OTEL_DENO_CONSOLE" ? "replace" : "true"), "replace");
 * assert.equal(otelConsoleMode(() => { throw new Error("no env access"); }), "capture");
 * ```
 */
export function otelConsoleMode(
  env: (name: string) => string | undefined,
): "capture" | "replace" | "ignore" {
  try {
    const mode = env("OTEL_DENO_CONSOLE");
    return mode === "replace" || mode === "ignore" ? mode : "capture";
  } catch {
    return "capture";
  }
}
