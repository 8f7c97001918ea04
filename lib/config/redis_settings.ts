/**
 * The Redis store's settings: `REDIS_TYPE`, `REDIS_URL` (one URL, or a list for a cluster or
 * Sentinel) and `REDIS_SENTINEL_MASTER`, checked as the Redis client would take them, with the
 * credentials they may hold kept out of every message.
 *
 * @module
 */

import type { StoreSettings } from "../limit/open_store.ts";
import { oneOf, type Reader } from "./env.ts";
import { redactSecrets } from "./messages.ts";

/** `REDIS_TYPE`, `REDIS_URL` (one URL, or a list for a cluster or Sentinel) and `REDIS_SENTINEL_MASTER`. */
export function redisSettings(
  reader: Reader,
  used: boolean,
): Pick<StoreSettings, "redisUrl" | "redisType" | "redisSentinelMaster"> {
  const { read, errors } = reader;
  const redisType = oneOf(
    read("REDIS_TYPE"),
    ["single", "cluster", "sentinel"] as const,
    "REDIS_TYPE",
    errors,
  );
  const redisSentinelMaster = read("REDIS_SENTINEL_MASTER");
  const redisUrl = redisUrlSetting(reader, used, redisType);
  if (used && redisType === "sentinel" && redisSentinelMaster === undefined) {
    errors.push(
      "REDIS_SENTINEL_MASTER is required with REDIS_TYPE=sentinel: the name the sentinels monitor the primary by (sentinel monitor <name> ...)",
    );
  }
  if (used && redisType !== "sentinel" && redisSentinelMaster !== undefined) {
    errors.push(
      `REDIS_SENTINEL_MASTER is set but REDIS_TYPE is ${redisType}: set REDIS_TYPE=sentinel, or unset REDIS_SENTINEL_MASTER`,
    );
  }
  return { redisUrl, redisType, redisSentinelMaster };
}

/**
 * `REDIS_URL`: redis:// or rediss:// URLs the client accepts, required with the Redis store; one
 * for `single`, a comma-separated list of seed nodes or sentinels, reached alike, otherwise.
 */
function redisUrlSetting(
  { read, errors }: Reader,
  required: boolean,
  type: StoreSettings["redisType"],
): string | undefined {
  const redisUrl = read("REDIS_URL");
  if (redisUrl === undefined) {
    if (required) {
      errors.push(
        `REDIS_URL is required with RATE_LIMIT_STORE=redis (e.g. ${
          type === "single"
            ? "redis://127.0.0.1:6379"
            : "redis://10.0.0.1:7000,redis://10.0.0.2:7000"
        })`,
      );
    }
    return undefined;
  }
  const entries = redisUrl.split(",").map((entry) => entry.trim()).filter((entry) => entry !== "");
  if (type === "single" && entries.length > 1) {
    errors.push(
      `REDIS_URL names ${entries.length} URLs, and REDIS_TYPE=single takes one: set REDIS_TYPE=cluster (seed nodes) or sentinel (sentinels) for a list`,
    );
    return redisUrl;
  }
  const urls: URL[] = [];
  for (const entry of entries) {
    if (unescapedUserinfo(entry)) {
      errors.push(
        `REDIS_URL has a user name or password holding a "#", "/" or "?", which ends that part of a URL: percent-encode it (# as %23, / as %2F, ? as %3F; encodeURIComponent does), got ${
          JSON.stringify(redactSecrets(entry))
        }`,
      );
      continue;
    }
    const url = URL.parse(entry);
    if (url?.protocol !== "redis:" && url?.protocol !== "rediss:") {
      errors.push(
        `REDIS_URL must be ${
          type === "single"
            ? "a redis:// or rediss:// URL"
            : "a comma-separated list of redis:// or rediss:// URLs"
        }, got ${JSON.stringify(redactSecrets(entry))}`,
      );
      continue;
    }
    const problem = redisUrlProblem(url, type);
    if (problem) errors.push(`REDIS_URL ${problem}, got ${JSON.stringify(redactSecrets(entry))}`);
    urls.push(url);
  }
  const problem = redisListProblem(urls);
  if (problem) errors.push(`REDIS_URL ${problem}`);
  return redisUrl;
}

/** What a list of URLs may not do: every node of a topology is reached with one scheme and login. */
function redisListProblem(urls: readonly URL[]): string | undefined {
  const login = (url: URL) => `${url.protocol}//${url.username}:${url.password}`;
  if (urls.some((url) => url.protocol !== urls[0]!.protocol)) {
    return "mixes redis:// and rediss://: every node of a cluster or Sentinel setup is reached the same way";
  }
  if (urls.some((url) => login(url) !== login(urls[0]!))) {
    return "has URLs with different user names or passwords: every node is reached with the same credentials";
  }
  return undefined;
}

/**
 * Whether `entry`, a `redis://` or `rediss://` URL as written, has a `/`, `?` or `#` before its
 * last `@`: a password holding one, not percent-encoded, which the URL parser takes for the start
 * of the path, query or fragment, so that the URL is refused or names another host.
 */
function unescapedUserinfo(entry: string): boolean {
  const rest = /^rediss?:\/\/(.*)$/is.exec(entry)?.[1];
  if (rest === undefined) return false;
  const at = rest.lastIndexOf("@");
  const cut = rest.search(/[/?#]/);
  return at >= 0 && cut >= 0 && cut < at;
}

/** What the Redis client would refuse in a redis:// URL: a path that is not a database number, bad escapes. */
function redisUrlProblem(url: URL, type: StoreSettings["redisType"]): string | undefined {
  if (!/^\/?(\d+)?$/.test(url.pathname)) {
    return "may name a database number as its path (redis://host:6379/0) and nothing else";
  }
  if (type !== "single" && !/^\/?0?$/.test(url.pathname)) {
    return `may not name a database with REDIS_TYPE=${type}: the limiter uses database 0 there`;
  }
  try {
    decodeURIComponent(url.username);
    decodeURIComponent(url.password);
  } catch {
    return "has a user name or password with a malformed %-escape";
  }
  return undefined;
}
