/**
 * The configuration, from environment variables, validated once at start-up: the composition of its
 * concerns, each in its own module (where to listen, what is published, the limit and its store,
 * the callers and the operator's controls, a removal), read through `env.ts`.
 *
 * Every variable has an embedded default so that `deno task start` needs none. `loadConfig` never
 * throws for bad input: it collects every problem so that an operator sees them all in one message
 * (`messages.ts`).
 *
 * @module
 */

import type { StoreSettings } from "../limit/open_store.ts";
import { type CallerSettings, callerSettings } from "./callers.ts";
import { boolean, type Env, readerOf } from "./env.ts";
import { rateLimitSettings } from "./limit_settings.ts";
import { type ListenSettings, listenSettings } from "./listen.ts";
import { baseUrlOf, contentSignalOf, type ProductSettings, productSettings } from "./product.ts";
import { type RemovalSettings, removalSettings } from "./removal.ts";
import { addressProblem } from "./rules.ts";

/** The validated service configuration. */
export interface Config
  extends ListenSettings, ProductSettings, StoreSettings, CallerSettings, RemovalSettings {
  /** Whether one JSON line per request is written to stdout. */
  accessLog: boolean;
}

/** The outcome of {@linkcode loadConfig}: a config, or every problem found. */
export type ConfigResult = { ok: true; config: Config } | { ok: false; errors: string[] };

/**
 * Reads and validates the configuration; the problems in the order of the variables' concerns.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { recordEnv } from "./env.ts";
 * const result = loadConfig(recordEnv({ PORT: "8080" }));
 * assert(result.ok);
 * assert.equal(result.config.baseUrl, "http://localhost:8080");
 * assert.deepEqual(loadConfig(recordEnv({ PORT: "http" })).ok, false);
 * ```
 */
export function loadConfig(env: Env): ConfigResult {
  const reader = readerOf(env);
  const { read, errors } = reader;
  const listen = listenSettings(reader);
  const baseUrl = baseUrlOf(read("PUBLIC_BASE_URL"), listen.port, errors);
  const supportEmail = read("SUPPORT_EMAIL") ?? "support@example.com";
  const emailProblem = addressProblem("SUPPORT_EMAIL", supportEmail);
  if (emailProblem !== undefined) errors.push(emailProblem);
  const limits = rateLimitSettings(reader);
  const callers = callerSettings(reader);
  const removal = removalSettings(reader);
  const accessLog = boolean(read("ACCESS_LOG"), true, "ACCESS_LOG", errors);
  const config: Config = {
    ...listen,
    baseUrl,
    ...productSettings(reader, baseUrl, supportEmail),
    ...limits,
    ...callers,
    ...removal,
    accessLog,
    contentSignal: contentSignalOf(read("CONTENT_SIGNAL"), errors),
  };
  return errors.length > 0 ? { ok: false, errors } : { ok: true, config };
}
