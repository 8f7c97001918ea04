/**
 * The environment variables the service reads, and how each is read: trimmed, empty as unset, a
 * whole number in a range, one of some words, true or false; every problem gathered, one sentence
 * each, for `config.ts` to refuse them all at once.
 *
 * @module
 */

/**
 * The environment variables the service reads; each is a row of README.md's configuration table
 * (tests/docs_test.ts checks both ways).
 */
export const ENV_NAMES = [
  "PORT",
  "HOSTNAME",
  "REUSE_PORT",
  "HEALTH_PORT",
  "PUBLIC_BASE_URL",
  "PRODUCT_NAME",
  "PRODUCT_DESCRIPTION",
  "DOCUMENTATION_URL",
  "DEVELOPER_RESOURCES_URL",
  "OPENAPI_URL",
  "AGENT_INSTRUCTIONS_URL",
  "SUPPORT_EMAIL",
  "SUPPORT_URL",
  "RATE_LIMIT",
  "RATE_LIMIT_WINDOW_SECONDS",
  "RATE_LIMIT_MAX_CALLERS",
  "RATE_LIMIT_STORE",
  "KV_PATH",
  "SQLITE_PATH",
  "REDIS_URL",
  "REDIS_TYPE",
  "REDIS_SENTINEL_MASTER",
  "RATE_LIMIT_STORE_TIMEOUT_MS",
  "RATE_LIMIT_ON_STORE_ERROR",
  "RATE_LIMIT_CONSISTENCY",
  "RATE_LIMIT_SYNC_MS",
  "TRUSTED_PROXIES",
  "TRUSTED_PROXY_HEADER",
  "RATE_LIMIT_EXEMPT",
  "RATE_LIMIT_DENY",
  "RATE_LIMIT_MODE",
  "DEPRECATION_DATE",
  "SUNSET_DATE",
  "ACCESS_LOG",
  "CONTENT_SIGNAL",
] as const;

/** One of {@linkcode ENV_NAMES}. */
export type EnvName = typeof ENV_NAMES[number];

/** Where configuration comes from: a lookup by name, so tests can pass a plain object. */
export type Env = (name: EnvName) => string | undefined;

/** Builds an {@linkcode Env} from a plain record, for tests and embedding. */
export function recordEnv(record: Partial<Record<EnvName, string>>): Env {
  return (name) => record[name];
}

/** Reads variables (trimmed; empty is unset) and gathers every problem found in `errors`. */
export interface Reader {
  /** The variable, trimmed; undefined when unset or empty. */
  read(name: EnvName): string | undefined;
  /** The variable as a whole number in `range`, else `fallback` (and a problem). */
  int(name: EnvName, fallback: number, range: { min: number; max: number }): number;
  /** Every problem found so far, one sentence each. */
  errors: string[];
}

/** A {@linkcode Reader} of `env`, with no problem found yet. */
export function readerOf(env: Env): Reader {
  const errors: string[] = [];
  const read = (name: EnvName): string | undefined => {
    const value = env(name)?.trim();
    return value === "" ? undefined : value;
  };
  return {
    read,
    int: (name, fallback, range) => integer(read(name), fallback, name, range, errors),
    errors,
  };
}

function integer(
  raw: string | undefined,
  fallback: number,
  name: string,
  range: { min: number; max: number },
  errors: string[],
): number {
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw)) {
    errors.push(
      `${name} must be a whole number from ${range.min} to ${range.max}, got ${
        JSON.stringify(raw)
      }`,
    );
    return fallback;
  }
  const value = Number(raw);
  if (value < range.min || value > range.max) {
    errors.push(`${name} must be from ${range.min} to ${range.max}, got ${raw}`);
    return fallback;
  }
  return value;
}

/** Reads one of `choices`, the first being the default; case does not matter. */
/** Reads one of `choices`, the first being the default; case does not matter. */
export function oneOf<T extends string>(
  raw: string | undefined,
  choices: readonly [T, ...T[]],
  name: string,
  errors: string[],
): T {
  if (raw === undefined) return choices[0];
  const value = raw.toLowerCase();
  const found = choices.find((choice) => choice === value);
  if (found !== undefined) return found;
  errors.push(
    `${name} must be ${choices.slice(0, -1).join(", ")} or ${choices.at(-1)}, got ${
      JSON.stringify(raw)
    }`,
  );
  return choices[0];
}

/** Reads `true`, `1`, `yes`, `on` or their opposites; `fallback` when unset. */
export function boolean(
  raw: string | undefined,
  fallback: boolean,
  name: string,
  errors: string[],
): boolean {
  if (raw === undefined) return fallback;
  const value = raw.toLowerCase();
  if (["true", "1", "yes", "on"].includes(value)) return true;
  if (["false", "0", "no", "off"].includes(value)) return false;
  errors.push(`${name} must be true or false, got ${JSON.stringify(raw)}`);
  return fallback;
}
