/**
 * The limit and where it is kept: `RATE_LIMIT`, `RATE_LIMIT_WINDOW_SECONDS`,
 * `RATE_LIMIT_MAX_CALLERS`, `RATE_LIMIT_STORE` and each store's settings (`KV_PATH`, `SQLITE_PATH`,
 * Redis's in `redis_settings.ts`), the timeout, the failure policy and the consistency.
 *
 * @module
 */

import { KV_MAX_LIMIT } from "../limit/kv/kv_limit.ts";
import type { StoreSettings } from "../limit/open_store.ts";
import { CONTROL_CHARACTERS } from "../text/control_characters.ts";
import { oneOf, type Reader } from "./env.ts";
import { redisSettings } from "./redis_settings.ts";

/** The limit, its window, the store and the store's settings. */
export function rateLimitSettings(reader: Reader): StoreSettings {
  const { read, int, errors } = reader;
  const rateLimit = int("RATE_LIMIT", 60, { min: 1, max: 1_000_000 });
  const rateLimitWindowSeconds = int("RATE_LIMIT_WINDOW_SECONDS", 60, { min: 1, max: 86_400 });
  const rateLimitMaxCallers = int("RATE_LIMIT_MAX_CALLERS", 500_000, { min: 1, max: 100_000_000 });
  const rateLimitStore = oneOf(
    read("RATE_LIMIT_STORE"),
    ["memory", "kv", "redis", "sqlite"] as const,
    "RATE_LIMIT_STORE",
    errors,
  );
  const kvPath = read("KV_PATH");
  const sqlitePath = sqlitePathSetting(reader, rateLimitStore === "sqlite");
  const consistency = consistencySettings(reader, rateLimitStore === "sqlite");
  // Only `exact` keeps a caller's log in one KV value; `local-first` keeps it in memory and sends
  // batches, split to fit a value, so the cap would refuse a setting that works.
  if (
    rateLimitStore === "kv" && consistency.rateLimitConsistency === "exact" &&
    rateLimit > KV_MAX_LIMIT
  ) {
    errors.push(
      `RATE_LIMIT must be at most ${KV_MAX_LIMIT} with RATE_LIMIT_STORE=kv and RATE_LIMIT_CONSISTENCY=exact (one caller's log is one KV value; local-first has no such cap), got ${rateLimit}`,
    );
  }
  const redis = redisSettings(reader, rateLimitStore === "redis");
  const rateLimitStoreTimeoutMs = int("RATE_LIMIT_STORE_TIMEOUT_MS", 100, { min: 1, max: 60_000 });
  const rateLimitOnStoreError = oneOf(
    read("RATE_LIMIT_ON_STORE_ERROR"),
    ["open", "closed"] as const,
    "RATE_LIMIT_ON_STORE_ERROR",
    errors,
  );
  return {
    rateLimit,
    rateLimitWindowSeconds,
    rateLimitMaxCallers,
    rateLimitStore,
    kvPath,
    sqlitePath,
    ...redis,
    rateLimitStoreTimeoutMs,
    rateLimitOnStoreError,
    ...consistency,
  };
}

/**
 * `RATE_LIMIT_CONSISTENCY` and `RATE_LIMIT_SYNC_MS`: how a shared store decides, how often it syncs.
 * The SQLite store is a hit log only: `local-first` is its default, and `exact` is refused.
 */
function consistencySettings(
  { read, int, errors }: Reader,
  hitLogOnly: boolean,
): Pick<StoreSettings, "rateLimitConsistency" | "rateLimitSyncMs"> {
  const raw = read("RATE_LIMIT_CONSISTENCY");
  const rateLimitConsistency = oneOf(
    raw ?? (hitLogOnly ? "local-first" : undefined),
    ["exact", "local-first"] as const,
    "RATE_LIMIT_CONSISTENCY",
    errors,
  );
  if (hitLogOnly && rateLimitConsistency === "exact") {
    errors.push(
      "RATE_LIMIT_CONSISTENCY must be local-first (or unset) with RATE_LIMIT_STORE=sqlite: the SQLite store is a shared hit log, each instance decides in memory (for an exact limit across instances use redis)",
    );
  }
  return {
    rateLimitConsistency,
    rateLimitSyncMs: int("RATE_LIMIT_SYNC_MS", 50, { min: 1, max: 60_000 }),
  };
}

/**
 * `SQLITE_PATH`: the SQLite file of `RATE_LIMIT_STORE=sqlite`, required with it. A file on this
 * machine that every instance opens: not `:memory:` nor a URI (each process would have its own).
 */
function sqlitePathSetting({ read, errors }: Reader, used: boolean): string | undefined {
  const path = read("SQLITE_PATH");
  if (!used) return path;
  if (path === undefined) {
    errors.push(
      "SQLITE_PATH is required with RATE_LIMIT_STORE=sqlite: the file every instance on this machine shares (e.g. SQLITE_PATH=/var/lib/discovery/hits.sqlite3)",
    );
  } else if (
    path.startsWith(":") || /^file:/i.test(path) || CONTROL_CHARACTERS.test(path) ||
    path.length > MAX_SQLITE_PATH_LENGTH
  ) {
    errors.push(
      `SQLITE_PATH must be a file path of at most ${MAX_SQLITE_PATH_LENGTH} characters (not :memory: nor a URI: every instance must open the same file), got ${
        JSON.stringify(path.slice(0, 100))
      }`,
    );
  }
  return path;
}

/** The longest `SQLITE_PATH`: Linux's `PATH_MAX`. */
const MAX_SQLITE_PATH_LENGTH = 4096;
