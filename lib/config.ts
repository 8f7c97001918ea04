/**
 * Configuration from environment variables, validated once at start-up.
 *
 * Every variable has an embedded default so that `deno task start` needs none. `loadConfig` never
 * throws for bad input: it collects every problem so that an operator sees them all in one message.
 *
 * @module
 */

import { type CidrSet, parseCidrSet, parseIp } from "./http/address.ts";
import type { ForwardedHeader } from "./http/forwarded.ts";
import { controlListProblems } from "./limit/caller/caller_controls.ts";
import { KV_MAX_LIMIT } from "./limit/kv/kv_limit.ts";
import type { StoreSettings } from "./limit/open_store.ts";
import { CONTROL_CHARACTERS } from "./text/control_characters.ts";

/** The minimum time between the announcement of a removal and the removal itself (spec section 9). */
export const MIN_DEPRECATION_NOTICE_DAYS = 90;

const DAY_MS = 86_400_000;

/** A DNS host name (RFC 1123 labels). */
const HOST_NAME =
  /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** The validated service configuration. */
export interface Config extends StoreSettings {
  /** TCP port to listen on. */
  port: number;
  /** Interface to listen on. */
  hostname: string;
  /** Whether another process may listen on the same port (`SO_REUSEPORT`), for a one-port handover. */
  reusePort: boolean;
  /** Public base URL, without a trailing slash; every absolute link is built from it. */
  baseUrl: string;
  /** Product name (Platform `name`). */
  name: string;
  /** Product summary (Platform `description`). */
  description: string;
  /** Platform `documentation`. */
  documentationUrl: string;
  /** Platform `developerResources`. */
  developerResourcesUrl: string;
  /** Platform `openapi`. */
  openapiUrl: string;
  /** Platform `agentInstructions`. */
  agentInstructionsUrl: string;
  /** Platform `support`. */
  supportUrl: string;
  /** Address for access requests (customer-data APIs, research server). */
  supportEmail: string;
  /** Peers whose forwarded headers are believed; empty means none. */
  trustedProxies: CidrSet;
  /** The header read from trusted proxies. */
  forwardedHeader: ForwardedHeader;
  /** `RATE_LIMIT_EXEMPT`: callers decided and counted like anyone, never refused. */
  rateLimitExempt: CidrSet;
  /** `RATE_LIMIT_DENY`: callers answered 403 before any store call. */
  rateLimitDeny: CidrSet;
  /** `RATE_LIMIT_MODE`: `enforce` refuses over the limit; `report` serves and reports would-be refusals. */
  rateLimitMode: "enforce" | "report";
  /** When v1 is (or will be) deprecated, if a removal has been announced. */
  deprecation: Date | undefined;
  /** When v1 will be removed, if a removal has been announced. */
  sunset: Date | undefined;
  /** Whether one JSON line per request is written to stdout. */
  accessLog: boolean;
  /** `CONTENT_SIGNAL`, normalised: the `Content-Signal` of robots.txt and of HTML and Markdown responses. */
  contentSignal: string;
}

/** The outcome of {@linkcode loadConfig}: a config, or every problem found. */
export type ConfigResult = { ok: true; config: Config } | { ok: false; errors: string[] };

/**
 * The environment variables the service reads; each is a row of README.md's configuration table
 * (tests/docs_test.ts checks both ways).
 */
export const ENV_NAMES = [
  "PORT",
  "HOSTNAME",
  "REUSE_PORT",
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

/**
 * Reads and validates the configuration.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const result = loadConfig(recordEnv({ PORT: "8080" }));
 * assert(result.ok);
 * assert.equal(result.config.baseUrl, "http://localhost:8080");
 * assert.deepEqual(loadConfig(recordEnv({ PORT: "http" })).ok, false);
 * ```
 */
export function loadConfig(env: Env): ConfigResult {
  const reader = readerOf(env);
  const { read, errors } = reader;
  const { port, hostname, reusePort } = listenSettings(reader);
  const baseUrl = baseUrlOf(read("PUBLIC_BASE_URL"), port, errors);
  const supportEmail = read("SUPPORT_EMAIL") ?? "support@example.com";
  const emailProblem = addressProblem("SUPPORT_EMAIL", supportEmail);
  if (emailProblem !== undefined) errors.push(emailProblem);
  const limits = rateLimitSettings(reader);
  const proxies = proxySettings(reader);
  const controls = controlSettings(reader, proxies.trustedProxies);
  const removal = removalSettings(reader);
  const accessLog = boolean(read("ACCESS_LOG"), true, "ACCESS_LOG", errors);
  const config: Config = {
    port,
    hostname,
    reusePort,
    baseUrl,
    ...productSettings(reader, baseUrl, supportEmail),
    ...limits,
    ...proxies,
    ...controls,
    ...removal,
    accessLog,
    contentSignal: contentSignalOf(read("CONTENT_SIGNAL"), errors),
  };
  return errors.length > 0 ? { ok: false, errors } : { ok: true, config };
}

/** The keys of the Content Signals Policy (contentsignals.org), in the order the service writes them. */
const CONTENT_SIGNAL_KEYS = ["search", "ai-input", "ai-train"] as const;

/**
 * The default `CONTENT_SIGNAL`: a public discovery directory wants to be found and quoted (search,
 * ai-input), and reserves training (lib/pages/README.md, "Content signals").
 */
const DEFAULT_CONTENT_SIGNAL = "search=yes, ai-input=yes, ai-train=no";

/**
 * `CONTENT_SIGNAL`: each of {@linkcode CONTENT_SIGNAL_KEYS} once, `yes` or `no`, comma-separated in
 * any order; normalised to that order and `, ` so it can go into robots.txt and a header as is.
 */
function contentSignalOf(raw: string | undefined, errors: string[]): string {
  if (raw === undefined) return DEFAULT_CONTENT_SIGNAL;
  const values = new Map<string, string>();
  for (const entry of raw.split(",")) {
    const match = /^\s*([a-z-]+)\s*=\s*(yes|no)\s*$/.exec(entry);
    const key = match?.[1];
    if (!match || !CONTENT_SIGNAL_KEYS.some((known) => known === key) || values.has(key!)) {
      values.clear();
      break;
    }
    values.set(key!, match[2]!);
  }
  if (values.size !== CONTENT_SIGNAL_KEYS.length) {
    errors.push(
      `CONTENT_SIGNAL must give search, ai-input and ai-train each once as yes or no (e.g. ${DEFAULT_CONTENT_SIGNAL}), got ${
        JSON.stringify(raw.slice(0, 200))
      }`,
    );
    return DEFAULT_CONTENT_SIGNAL;
  }
  return CONTENT_SIGNAL_KEYS.map((key) => `${key}=${values.get(key)}`).join(", ");
}

/** Reads variables (trimmed; empty is unset) and gathers every problem found in `errors`. */
interface Reader {
  read(name: EnvName): string | undefined;
  int(name: EnvName, fallback: number, range: { min: number; max: number }): number;
  errors: string[];
}

function readerOf(env: Env): Reader {
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

/** `PORT`, `HOSTNAME` and `REUSE_PORT`. */
function listenSettings(
  { read, int, errors }: Reader,
): Pick<Config, "port" | "hostname" | "reusePort"> {
  const port = int("PORT", 8000, { min: 0, max: 65535 });
  const hostname = read("HOSTNAME") ?? "0.0.0.0";
  if (parseIp(hostname) === undefined && !HOST_NAME.test(hostname)) {
    errors.push(
      `HOSTNAME must be an IP address or a host name to listen on, got ${JSON.stringify(hostname)}`,
    );
  }
  // Off by default: with it, a second instance started by mistake on the same port shares it
  // silently instead of failing with "address in use".
  const reusePort = boolean(read("REUSE_PORT"), false, "REUSE_PORT", errors);
  return { port, hostname, reusePort };
}

/** The product's name, description and the Platform's links (defaults under `baseUrl`). */
function productSettings(
  { read, errors }: Reader,
  baseUrl: string,
  supportEmail: string,
): Pick<
  Config,
  | "name"
  | "description"
  | "documentationUrl"
  | "developerResourcesUrl"
  | "openapiUrl"
  | "agentInstructionsUrl"
  | "supportUrl"
  | "supportEmail"
> {
  const link = (name: EnvName, fallback: string) => absoluteUri(read(name), fallback, name, errors);
  const text = (name: EnvName, fallback: string, maxLength: number) => {
    const value = read(name) ?? fallback;
    const problem = oneLineTextProblem(name, value, maxLength);
    if (problem !== undefined) errors.push(problem);
    return value;
  };
  return {
    name: text("PRODUCT_NAME", "Legal Intelligence Platform", MAX_NAME_LENGTH),
    description: text(
      "PRODUCT_DESCRIPTION",
      "Public directory of the legal intelligence platform's documentation, developer resources, OpenAPI description, agent instructions and support.",
      MAX_DESCRIPTION_LENGTH,
    ),
    documentationUrl: link("DOCUMENTATION_URL", `${baseUrl}/`),
    developerResourcesUrl: link("DEVELOPER_RESOURCES_URL", `${baseUrl}/developers`),
    openapiUrl: link("OPENAPI_URL", `${baseUrl}/openapi.json`),
    agentInstructionsUrl: link("AGENT_INSTRUCTIONS_URL", `${baseUrl}/llms.txt`),
    supportUrl: link("SUPPORT_URL", `mailto:${supportEmail}`),
    supportEmail,
  };
}

/** The limit, its window, the store and the store's settings. */
function rateLimitSettings(reader: Reader): StoreSettings {
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

/** `REDIS_TYPE`, `REDIS_URL` (one URL, or a list for a cluster or Sentinel) and `REDIS_SENTINEL_MASTER`. */
function redisSettings(
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
          JSON.stringify(redacted(entry))
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
        }, got ${JSON.stringify(redacted(entry))}`,
      );
      continue;
    }
    const problem = redisUrlProblem(url, type);
    if (problem) errors.push(`REDIS_URL ${problem}, got ${JSON.stringify(redacted(entry))}`);
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

/** `TRUSTED_PROXIES` and `TRUSTED_PROXY_HEADER`. */
function proxySettings(
  { read, errors }: Reader,
): Pick<Config, "trustedProxies" | "forwardedHeader"> {
  let trustedProxies: CidrSet = parseCidrSet("").set;
  const proxies = parseCidrSet(read("TRUSTED_PROXIES") ?? "");
  if (proxies.invalid.length > 0) {
    errors.push(
      `TRUSTED_PROXIES must be a comma-separated list of IP addresses, CIDR ranges or unix; not understood: ${
        proxies.invalid.map((entry) => JSON.stringify(entry)).join(", ")
      }`,
    );
  } else {
    trustedProxies = proxies.set;
  }
  const header = (read("TRUSTED_PROXY_HEADER") ?? "x-forwarded-for").toLowerCase();
  let forwardedHeader: ForwardedHeader = "x-forwarded-for";
  if (header === "x-forwarded-for" || header === "forwarded") {
    forwardedHeader = header;
  } else {
    errors.push(
      `TRUSTED_PROXY_HEADER must be x-forwarded-for or forwarded, got ${JSON.stringify(header)}`,
    );
  }
  return { trustedProxies, forwardedHeader };
}

/**
 * `RATE_LIMIT_EXEMPT` and `RATE_LIMIT_DENY` (`TRUSTED_PROXIES`' syntax, checked by
 * `controlListProblems`) and `RATE_LIMIT_MODE`.
 */
function controlSettings(
  { read, errors }: Reader,
  trustedProxies: CidrSet,
): Pick<Config, "rateLimitExempt" | "rateLimitDeny" | "rateLimitMode"> {
  const list = (name: "RATE_LIMIT_EXEMPT" | "RATE_LIMIT_DENY"): CidrSet => {
    const parsed = parseCidrSet(read(name) ?? "");
    if (parsed.invalid.length > 0) {
      errors.push(
        `${name} must be a comma-separated list of IP addresses or CIDR ranges; not understood: ${
          parsed.invalid.slice(0, 5).map((entry) => JSON.stringify(entry.slice(0, 60))).join(", ")
        }`,
      );
      return parseCidrSet("").set;
    }
    const problems = controlListProblems(name, parsed.set, trustedProxies);
    errors.push(...problems);
    return problems.length > 0 ? parseCidrSet("").set : parsed.set;
  };
  return {
    rateLimitExempt: list("RATE_LIMIT_EXEMPT"),
    rateLimitDeny: list("RATE_LIMIT_DENY"),
    rateLimitMode: oneOf(
      read("RATE_LIMIT_MODE"),
      ["enforce", "report"] as const,
      "RATE_LIMIT_MODE",
      errors,
    ),
  };
}

/** `DEPRECATION_DATE` and `SUNSET_DATE`: both or neither, at least the minimum notice apart. */
function removalSettings({ read, errors }: Reader): Pick<Config, "deprecation" | "sunset"> {
  const deprecation = date(read("DEPRECATION_DATE"), "DEPRECATION_DATE", errors);
  const sunset = date(read("SUNSET_DATE"), "SUNSET_DATE", errors);
  if ((deprecation === undefined) !== (sunset === undefined)) {
    if (!errors.some((e) => e.startsWith("DEPRECATION_DATE") || e.startsWith("SUNSET_DATE"))) {
      errors.push(
        "DEPRECATION_DATE and SUNSET_DATE announce a removal together: set both or neither",
      );
    }
  } else if (deprecation && sunset) {
    const days = (sunset.getTime() - deprecation.getTime()) / DAY_MS;
    if (days < MIN_DEPRECATION_NOTICE_DAYS) {
      errors.push(
        `SUNSET_DATE must be at least ${MIN_DEPRECATION_NOTICE_DAYS} days after DEPRECATION_DATE (spec section 9); they are ${
          Math.floor(days * 10) / 10
        } days apart`,
      );
    }
  }
  return { deprecation, sunset };
}

/** Formats the problems of a failed {@linkcode loadConfig} as one message for stderr. */
export function formatConfigErrors(errors: readonly string[]): string {
  return `Configuration is invalid (${errors.length} problem${
    errors.length === 1 ? "" : "s"
  }); nothing is served:\n${errors.map((e) => `  - ${redactSecrets(e)}`).join("\n")}`;
}

/** The longest `PRODUCT_NAME`: a name, shown in every page's header and title. */
const MAX_NAME_LENGTH = 100;

/** The longest `PRODUCT_DESCRIPTION`: a paragraph, shown on pages and in the Platform. */
const MAX_DESCRIPTION_LENGTH = 1000;

/**
 * Why `value` is not a one-line text the service may show (in HTML, Markdown, JSON and llms.txt,
 * escaped for each), or `undefined`: it may hold no control character or new line and at most
 * `maxLength` characters. Every free-text variable goes through it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(oneLineTextProblem("PRODUCT_NAME", "Acme [Legal]", 100), undefined);
 * assert.match(oneLineTextProblem("PRODUCT_NAME", "Acme\n# Injected", 100)!, /one line/);
 * ```
 */
export function oneLineTextProblem(
  name: string,
  value: string,
  maxLength: number,
): string | undefined {
  if (CONTROL_CHARACTERS.test(value)) {
    return `${name} must be one line of text without control characters (new lines, tabs, escapes, bidirectional controls): remove them from ${
      JSON.stringify(value)
    }`;
  }
  if (value.length > maxLength) {
    return `${name} must be at most ${maxLength} characters, got ${value.length}: shorten it`;
  }
  return undefined;
}

/** An http(s) URL's host: a DNS name, an IPv4 address or a bracketed IPv6 address. */
function hostProblem(url: URL): boolean {
  const host = url.hostname;
  if (host.startsWith("[")) return parseIp(host.slice(1, -1)) === undefined;
  return parseIp(host) === undefined && !HOST_NAME.test(host);
}

/**
 * The characters a link may hold once parsed: RFC 3986's unreserved and reserved ones but the
 * quote, parentheses and brackets (which end or open a Markdown link, or a shell word) and `%` as an
 * escape. A link that needs any other character percent-encodes it.
 */
const LINK_CHARACTERS = /^[A-Za-z0-9\-._~:/?#@!$&*+,;=%]*$/;

/**
 * Why `raw` is not a link the service may publish, or `undefined`: an absolute `http`, `https` or
 * `mailto` URI without control characters, whose host is a DNS name or an IP address, of
 * {@linkcode LINK_CHARACTERS} only (an IPv6 host's brackets aside), a `mailto:` naming one valid
 * address. Every link variable goes through it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(linkProblem("SUPPORT_URL", "https://example.com/help?a=1"), undefined);
 * assert.match(linkProblem("SUPPORT_URL", 'mailto:"><script>')!, /SUPPORT_URL/);
 * assert.match(linkProblem("DOCUMENTATION_URL", "javascript:alert(1)")!, /http, https or mailto/);
 * ```
 */
export function linkProblem(name: string, raw: string): string | undefined {
  const shown = JSON.stringify(redacted(raw));
  if (CONTROL_CHARACTERS.test(raw)) {
    return `${name} must be one line without control characters, got ${shown}`;
  }
  const url = URL.parse(raw);
  if (url === null) return `${name} must be an absolute URI, got ${shown}`;
  if (!["http:", "https:", "mailto:"].includes(url.protocol)) {
    return `${name} must be an http, https or mailto URI, got ${shown}`;
  }
  if (url.protocol === "mailto:") {
    const address = decodeURIComponentOr(url.pathname);
    if (url.search !== "" || url.hash !== "" || addressProblem(name, address) !== undefined) {
      return `${name} must be mailto: and one email address (mailto:support@example.com), got ${shown}`;
    }
    return undefined;
  }
  if (hostProblem(url)) {
    return `${name} must name a host by its DNS name or IP address, got ${shown}`;
  }
  const href = url.href.replace(`[${url.hostname.slice(1, -1)}]`, "");
  if (!LINK_CHARACTERS.test(href)) {
    return `${name} may not hold quotes, parentheses, brackets, braces, spaces or \\ ^ | < >: percent-encode them, got ${shown}`;
  }
  return undefined;
}

function decodeURIComponentOr(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/**
 * Why `raw` is not an email address the service may publish, or `undefined`: a local part of
 * letters, digits and single `.`, `_`, `+` or `-` between them, `@`, a DNS name with a dot. (RFC
 * 5322 allows more, quoted strings included; no operator means them, and each would need escaping
 * in Markdown, HTML and `mailto:` links.)
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(addressProblem("SUPPORT_EMAIL", "api.support+x@example.com"), undefined);
 * assert.match(addressProblem("SUPPORT_EMAIL", "sec_[t]*x&y@ex.com")!, /SUPPORT_EMAIL/);
 * ```
 */
export function addressProblem(name: string, raw: string): string | undefined {
  const at = raw.lastIndexOf("@");
  const local = raw.slice(0, at);
  const domain = raw.slice(at + 1);
  if (
    at < 1 || !/^[A-Za-z0-9]+(?:[._+-][A-Za-z0-9]+)*$/.test(local) || local.length > 64 ||
    !HOST_NAME.test(domain) || !domain.includes(".")
  ) {
    return `${name} must be an email address (letters, digits and . _ + - before the @, a domain with a dot after it), got ${
      JSON.stringify(raw)
    }`;
  }
  return undefined;
}

/** What the Redis client would refuse in a redis:// URL: a path that is not a database number, bad escapes. */
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
function oneOf<T extends string>(
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

/** A value without its credentials, for error messages ({@linkcode redactSecrets}). */
function redacted(raw: string): string {
  return redactSecrets(raw);
}

/**
 * `text` with every credential it may hold masked as `***`: the password of anything shaped like
 * `scheme://user:password@host` or `user:password@host` (parsed or not: a URL that `URL.parse`
 * refuses, such as one with port 637900, is masked all the same), a userinfo holding no `:`
 * (it may be a token), and the value of `name=value` pairs whose name says it is secret
 * (`Authorization=Bearer x`, `api-key=x`, `token=x`: `OTEL_EXPORTER_OTLP_HEADERS`' shape). Every
 * start-up message goes through it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(
 *   redactSecrets("REDIS_URL got redis://default:hunter2@redis.internal:637900"),
 *   "REDIS_URL got redis://default:***@redis.internal:637900",
 * );
 * assert.equal(redactSecrets("authorization=Bearer abc,x-ok=1"), "authorization=***,x-ok=1");
 * ```
 */
export function redactSecrets(text: string): string {
  return text
    .replace(/([a-z][a-z0-9+.-]*:\/\/)([^\s"'<>]*)@/gi, (_, scheme: string, info: string) => {
      const colon = info.indexOf(":");
      // The user name is kept: it names the account to check, and is no secret.
      return `${scheme}${colon < 0 ? "" : info.slice(0, colon + 1)}***@`;
    })
    .replace(
      /(^|[\s"',;=(])([^\s:/@"',;=()]+):(?!\/\/)([^\s"'<>]*)@/g,
      (whole, before: string, user: string) =>
        user.toLowerCase() === "mailto" ? whole : `${before}${user}:***@`,
    )
    .replace(
      /((?:^|[\s,;"'{])[\w.-]*(?:auth|token|key|secret|password|passwd|credential|session|cookie)[\w.-]*\s*=\s*)("[^"]*"|[^,;\s"']+(?: [^,;\s"'=]+)?)/gi,
      "$1***",
    );
}

function boolean(
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

function baseUrlOf(raw: string | undefined, port: number, errors: string[]): string {
  if (raw === undefined) {
    // Links must name the port callers use; with PORT=0 it is not known when they are built.
    if (port === 0) {
      errors.push("PUBLIC_BASE_URL must be set when PORT is 0: links must name the real port");
    }
    return `http://localhost:${port}`;
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    errors.push(
      `PUBLIC_BASE_URL must be an absolute http(s) URL, got ${JSON.stringify(redacted(raw))}`,
    );
    return raw;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    errors.push(`PUBLIC_BASE_URL must use http or https, got ${JSON.stringify(redacted(raw))}`);
    return raw;
  }
  if (url.search !== "" || url.hash !== "" || url.username !== "" || url.password !== "") {
    errors.push(
      `PUBLIC_BASE_URL must not carry credentials, a query or a fragment, got ${
        JSON.stringify(redacted(raw))
      }`,
    );
  }
  if (hostProblem(url)) {
    errors.push(
      `PUBLIC_BASE_URL must name a host by its DNS name or IP address, got ${
        JSON.stringify(redacted(raw))
      }`,
    );
  }
  // The base lands in links, Markdown and the portal's copy-paste shell lines unquoted: its path
  // holds only what none of them gives a meaning (RFC 3986's unreserved characters and /).
  if (!/^[A-Za-z0-9\-._~/]*$/.test(url.pathname) || CONTROL_CHARACTERS.test(raw)) {
    errors.push(
      `PUBLIC_BASE_URL's path may hold only letters, digits, - . _ ~ and /, got ${
        JSON.stringify(redacted(raw))
      }`,
    );
  }
  // Links are built as base + "/path": keep any path prefix, drop the trailing slash.
  return `${url.origin}${url.pathname.replace(/\/+$/, "")}`;
}

function absoluteUri(
  raw: string | undefined,
  fallback: string,
  name: string,
  errors: string[],
): string {
  if (raw === undefined) return fallback;
  const problem = linkProblem(name, raw);
  if (problem !== undefined) {
    errors.push(problem);
    return raw;
  }
  return new URL(raw).href;
}

function date(raw: string | undefined, name: string, errors: string[]): Date | undefined {
  if (raw === undefined) return undefined;
  // ISO 8601 only: Date.parse accepts many other forms whose meaning depends on the engine.
  const iso = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2}))?$/;
  const value = new Date(raw);
  const [year, month, day] = raw.slice(0, 10).split("-").map(Number) as [number, number, number];
  // Date rolls 2027-02-30 over to March; a calendar date that does not exist is a typo, not a date.
  const exists = new Date(Date.UTC(year, month - 1, day)).getUTCDate() === day && month >= 1 &&
    month <= 12;
  if (!iso.test(raw) || Number.isNaN(value.getTime()) || !exists) {
    errors.push(
      `${name} must be an ISO 8601 date (2027-03-01) or date-time with a zone (2027-03-01T00:00:00Z), got ${
        JSON.stringify(raw)
      }`,
    );
    return undefined;
  }
  return value;
}
