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

/**
 * The start-up warnings of an exporting process about what it will send and where its lines go:
 * `capture` prints the info events on stdout beside the access log (Deno's console prints `info`
 * there: ext/telemetry/telemetry.ts wraps the console, which it leaves printing), an unset
 * service name is reported as `unknown_service:deno`, and `OTEL_DENO=true` alone turns tracing on,
 * whose span per request costs most of the throughput. Each is one sentence naming the fix.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const env = { OTEL_DENO: "true" } as Record<string, string>;
 * assert.equal(otelStartWarnings((name) => env[name]).length, 3);
 * const set = {
 *   ...env,
 *   OTEL_DENO_TRACING: "false",
 *   OTEL_DENO_CONSOLE: "replace",
 *   OTEL_SERVICE_NAME: "discovery",
 * };
 * assert.deepEqual(otelStartWarnings((name) => (set as Record<string, string>)[name]), []);
 * // Tracing asked for by name is the operator's choice: no warning.
 * const traced = { ...set, OTEL_DENO_TRACING: "true" };
 * assert.deepEqual(otelStartWarnings((name) => (traced as Record<string, string>)[name]), []);
 * ```
 */
export function otelStartWarnings(env: (name: string) => string | undefined): string[] {
  const warnings: string[] = [];
  try {
    if (env("OTEL_DENO") === "true" && env("OTEL_DENO_TRACING") === undefined) {
      warnings.push(
        'OTEL_DENO_TRACING is unset, so OTEL_DENO=true traces every request: Deno builds a span per request whatever the sampler, measured at half of the throughput or more; set OTEL_DENO_TRACING=false to export metrics and logs only, or OTEL_DENO_TRACING=true to keep tracing (deploy/README.md, "What it costs")',
      );
    }
  } catch {
    // The compiled binary may not read them: its tracing was fixed when it was compiled.
  }
  if (otelConsoleMode(env) === "capture") {
    warnings.push(
      'OTEL_DENO_CONSOLE is capture (Deno\'s default): Deno prints the info events on stdout, beside the access log, as well as exporting them; set OTEL_DENO_CONSOLE=replace to keep every event on stderr (README.md, "Where each line goes")',
    );
  }
  let named = true;
  try {
    named = env("OTEL_SERVICE_NAME") !== undefined ||
      /(^|,)\s*service\.name=/.test(env("OTEL_RESOURCE_ATTRIBUTES") ?? "");
  } catch {
    // The compiled binary may not read them: the runtime still does.
  }
  if (!named) {
    warnings.push(
      "OTEL_SERVICE_NAME is unset: Deno reports this service as unknown_service:deno; set OTEL_SERVICE_NAME=discovery (or service.name in OTEL_RESOURCE_ATTRIBUTES)",
    );
  }
  return warnings;
}
