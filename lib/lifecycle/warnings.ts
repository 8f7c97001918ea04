/**
 * Every warning the service gives at start, in one file (as Fastify keeps its own in
 * `lib/warnings.js`): what each says, when it is due, and which entries give it. Each is a `warn`
 * event whose `warning` field names it (`report_mode`...), so that an operator can grep for it and
 * `tests/lifecycle/warnings_test.ts` can check that every entry it applies to gives it, as that
 * entry really starts.
 *
 * @module
 */

import { type Config } from "../config/config.ts";
import { MIN_DEPRECATION_NOTICE_DAYS } from "../config/removal.ts";
import { otelConsoleMode } from "../telemetry/enabled.ts";
import { event } from "./events.ts";

/** The ways the service starts. */
export type Entry =
  /** `deno task start`, `main.ts --listen`, the compiled binary. */
  | "deno"
  /** `deno serve` (`--parallel` too): the runtime listens. */
  | "deno-serve"
  /** Deno Deploy (`DENO_DEPLOY=true`). */
  | "deno-deploy"
  /** `npm start`, `node lib/node/main.ts`. */
  | "node"
  /** A Cloudflare Worker isolate's first request. */
  | "workers";

/** The code of each warning (the event's `warning` field). */
export type WarningCode =
  | "report_mode"
  | "sunset_soon"
  | "memory_reuse_port"
  | "memory_deno_deploy"
  | "memory_parallel_workers"
  | "memory_workers"
  | "workers_trusted_proxies"
  | "workers_http_base_url"
  | "serve_port"
  | "otel_exit_timeout"
  | "otel_tracing_unset"
  | "otel_console_capture"
  | "otel_service_name_unset";

/**
 * Where each warning applies. Those no Node entry gives: Deno Deploy's, `deno serve`'s and the
 * Worker's own (platforms Node is not), and OpenTelemetry's (Deno's built-in exporter; Node's entry
 * exports nothing). None is a Worker's but its own (`lib/workers/worker_rules.ts` finds two of
 * them), the report mode and the sunset: a Worker has no port and no exporter of the service's.
 */
export const WARNING_ENTRIES: Readonly<Record<WarningCode, readonly Entry[]>> = {
  report_mode: ["deno", "deno-serve", "deno-deploy", "node", "workers"],
  sunset_soon: ["deno", "deno-serve", "deno-deploy", "node", "workers"],
  memory_reuse_port: ["deno", "node"],
  memory_deno_deploy: ["deno-deploy"],
  memory_parallel_workers: ["deno-serve"],
  memory_workers: ["workers"],
  workers_trusted_proxies: ["workers"],
  workers_http_base_url: ["workers"],
  serve_port: ["deno-serve"],
  otel_exit_timeout: ["deno", "deno-serve", "deno-deploy"],
  otel_tracing_unset: ["deno", "deno-serve"],
  otel_console_capture: ["deno", "deno-serve"],
  otel_service_name_unset: ["deno", "deno-serve"],
};

/** One warning due: its code, its sentence, its fields. */
export interface Warning {
  /** Which warning. */
  code: WarningCode;
  /** One sentence naming the setting and the fix. */
  message: string;
  /** What the event carries beside it. */
  fields?: Record<string, unknown>;
}

/** Writes `warning` as a `warn` event. */
export function warn(warning: Warning): void {
  event("warn", warning.message, { warning: warning.code, ...warning.fields });
}

/** The warning of every start under `RATE_LIMIT_MODE=report`. */
export const REPORT_MODE_WARNING =
  "RATE_LIMIT_MODE=report: the rate limit is NOT enforced; requests over it are served and logged as report_refused (unset RATE_LIMIT_MODE, or set it to enforce, to refuse them)";

/** What {@linkcode startWarnings} reads. */
export interface StartFacts {
  /**
   * The validated configuration; `rateLimitStore` is the store the entry uses (a Worker's is
   * `durable-object` unless `RATE_LIMIT_STORE=memory`).
   */
  config: Pick<Config, "rateLimitMode" | "rateLimit" | "rateLimitWindowSeconds" | "sunset"> & {
    rateLimitStore: string;
    reusePort?: boolean;
  };
  /** How the service starts. */
  entry: Entry;
  /** The time now, in ms. */
  now: number;
}

/**
 * The warnings the configuration makes due at start for `entry`, in the order they are said.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const config = {
 *   rateLimitMode: "report",
 *   rateLimit: 60,
 *   rateLimitWindowSeconds: 60,
 *   sunset: undefined,
 *   rateLimitStore: "memory",
 *   reusePort: true,
 * } as const;
 * const codes = (entry: "node" | "workers") =>
 *   startWarnings({ config, entry, now: 0 }).map((warning) => warning.code);
 * assert.deepEqual(codes("node"), ["report_mode", "memory_reuse_port"]);
 * assert.deepEqual(codes("workers"), ["report_mode", "memory_workers"]);
 * ```
 */
export function startWarnings(facts: StartFacts): Warning[] {
  const { config, entry } = facts;
  const warnings: Warning[] = [];
  // Said on every start, so that a rollout left in report mode is seen in the logs
  // (lib/limit/README.md, "Operator controls").
  if (config.rateLimitMode === "report") {
    warnings.push({
      code: "report_mode",
      message: REPORT_MODE_WARNING,
      fields: { limit: config.rateLimit, window: config.rateLimitWindowSeconds },
    });
  }
  // The spec asks for the announcement at least 90 days before removal. Start-up checks the two
  // dates; whether the headers really went out that early depends on when this was first deployed.
  if (
    config.sunset && config.sunset.getTime() - facts.now < MIN_DEPRECATION_NOTICE_DAYS * 86_400_000
  ) {
    warnings.push({
      code: "sunset_soon",
      message:
        "SUNSET_DATE is less than 90 days away: the removal must have been announced (Deprecation and Sunset sent) since at least 90 days before it",
      fields: { sunset: config.sunset.toISOString() },
    });
  }
  const shared = config.rateLimitStore === "memory" ? sharedTrafficWarning(entry, config) : [];
  return [...warnings, ...shared];
}

/**
 * Where several processes or isolates share one caller's traffic while each counts with its own
 * memory store, a caller gets the limit once per process: the warning of each case an entry can
 * recognise from its own settings (`deno serve --parallel` is recognised by its workers:
 * {@linkcode parallelWorkersWarning}).
 */
function sharedTrafficWarning(entry: Entry, config: { reusePort?: boolean }): Warning[] {
  if (entry === "deno-deploy") {
    return [{
      code: "memory_deno_deploy",
      message:
        'the memory store on Deno Deploy: every isolate (one per region at least, more under load) counts its callers on its own, so a caller gets the limit once per isolate; attach a Deno KV database to the app (Databases, Assign) and set RATE_LIMIT_STORE=kv (lib/limit/README.md, "Which store to pick")',
    }];
  }
  if (entry === "workers") {
    return [{
      code: "memory_workers",
      message:
        'RATE_LIMIT_STORE=memory on Workers: every isolate (many, in every data centre) counts its callers on its own, so a caller gets the limit once per isolate; unset RATE_LIMIT_STORE to keep the limit in the Durable Object bound as RATE_LIMITER (deploy/README.md, "The limit on Workers: Durable Objects, not the Rate Limiting binding or KV")',
    }];
  }
  if ((entry === "deno" || entry === "node") && config.reusePort) {
    return [{
      code: "memory_reuse_port",
      message: entry === "node"
        ? 'REUSE_PORT=true with the memory store: each process on the port counts its callers on its own, and a process that takes the port over starts every count at zero; set RATE_LIMIT_STORE=sqlite with SQLITE_PATH naming one file both processes open (deploy/README.md, "One port")'
        : 'REUSE_PORT=true with the memory store: each process on the port counts its callers on its own, and a process that takes the port over starts every count at zero; set RATE_LIMIT_STORE=kv with KV_PATH naming one file both processes open (deploy/README.md, "One port")',
    }];
  }
  return [];
}

/** Says every warning of {@linkcode startWarnings}. */
export function sayStartWarnings(facts: StartFacts): void {
  for (const warning of startWarnings(facts)) warn(warning);
}

/**
 * On Workers, `TRUSTED_PROXIES` taken (`lib/workers/worker_rules.ts` refuses the values that cannot
 * be right there): right only for a proxy of the operator's own in front of Cloudflare.
 */
export function workersTrustedProxiesWarning(ranges: string): Warning {
  return {
    code: "workers_trusted_proxies",
    message:
      `TRUSTED_PROXIES=${ranges} is believed on Workers: right only for a proxy of your own in front of Cloudflare at those addresses (Cloudflare names it in CF-Connecting-IP and appends it to the X-Forwarded-For it wrote); otherwise remove it`,
  };
}

/** On Workers, a `PUBLIC_BASE_URL` over plain HTTP (not loopback's, `deno task worker`'s own). */
export function workersHttpBaseUrlWarning(baseUrl: string, host: string): Warning {
  return {
    code: "workers_http_base_url",
    message: `PUBLIC_BASE_URL is ${
      JSON.stringify(baseUrl)
    }: every link the service publishes sends callers over plain HTTP, while Cloudflare serves a custom domain over HTTPS; set it to https://${host}`,
  };
}

/** The warning for `workers` workers of `deno serve --parallel`, each with its memory store. */
export function parallelWorkersWarning(workers: number): Warning {
  return {
    code: "memory_parallel_workers",
    message:
      `deno serve --parallel runs ${workers} workers, each counting its callers in its own memory store, so a caller gets up to ${workers} times the limit; set RATE_LIMIT_STORE=kv with RATE_LIMIT_CONSISTENCY=local-first (deno task start:parallel does; lib/limit/README.md, "Several workers on one machine")`,
    fields: { workers },
  };
}

/** The warning when `PORT` names another port than the one `deno serve` listens on. */
export function servePortWarning(port: number, listening: number): Warning {
  return {
    code: "serve_port",
    message:
      `PORT=${port} is not the port deno serve listens on (${listening}): PORT and HOSTNAME apply to --listen; give deno serve --port (deno task start:parallel passes PORT as --port)`,
    fields: { port: listening },
  };
}

/**
 * The warning when a slow collector could hold the exit past the stop's deadline: Deno exports
 * the last interval at exit, after the shutdown, each export bounded by `OTEL_EXPORTER_OTLP_TIMEOUT`.
 */
export function otelExitWarning(deadlineMs: number, exitFlushBoundMs: number): Warning {
  return {
    code: "otel_exit_timeout",
    message:
      'OTEL_EXPORTER_OTLP_TIMEOUT lets a slow collector hold the exit past the shutdown deadline: set it to 500 (ms) or less (deploy/README.md, "Observability")',
    fields: { deadlineMs, exitFlushBoundMs },
  };
}

/**
 * The start-up warnings of a process that exports OpenTelemetry about what it will send and where
 * its lines go: `capture` prints the info events on stdout beside the access log (Deno's console
 * prints `info` there: ext/telemetry/telemetry.ts wraps the console, which it leaves printing), an
 * unset service name is reported as `unknown_service:deno`, and `OTEL_DENO=true` alone turns
 * tracing on, whose span per request costs most of the throughput. Each is one sentence naming the
 * fix. Deno Deploy takes no `OTEL_*` variable: none there.
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
export function otelStartWarnings(env: (name: string) => string | undefined): Warning[] {
  const warnings: Warning[] = [];
  try {
    if (env("OTEL_DENO") === "true" && env("OTEL_DENO_TRACING") === undefined) {
      warnings.push({
        code: "otel_tracing_unset",
        message:
          'OTEL_DENO_TRACING is unset, so OTEL_DENO=true traces every request: Deno builds a span per request whatever the sampler, measured at half of the throughput or more; set OTEL_DENO_TRACING=false to export metrics and logs only, or OTEL_DENO_TRACING=true to keep tracing (deploy/README.md, "What it costs")',
      });
    }
  } catch {
    // The compiled binary may not read them: its tracing was fixed when it was compiled.
  }
  if (otelConsoleMode(env) === "capture") {
    warnings.push({
      code: "otel_console_capture",
      message:
        'OTEL_DENO_CONSOLE is capture (Deno\'s default): Deno prints the info events on stdout, beside the access log, as well as exporting them, and prints them synchronously, so a full pipe stops the service; set OTEL_DENO_CONSOLE=replace to keep every event on stderr (README.md, "Where each line goes")',
    });
  }
  let named = true;
  try {
    named = env("OTEL_SERVICE_NAME") !== undefined ||
      /(^|,)\s*service\.name=/.test(env("OTEL_RESOURCE_ATTRIBUTES") ?? "");
  } catch {
    // The compiled binary may not read them: the runtime still does.
  }
  if (!named) {
    warnings.push({
      code: "otel_service_name_unset",
      message:
        "OTEL_SERVICE_NAME is unset: Deno reports this service as unknown_service:deno; set OTEL_SERVICE_NAME=discovery (or service.name in OTEL_RESOURCE_ATTRIBUTES)",
    });
  }
  return warnings;
}
