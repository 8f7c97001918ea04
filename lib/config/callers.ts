/**
 * Who the caller is and what the operator decided for some: `TRUSTED_PROXIES` and
 * `TRUSTED_PROXY_HEADER` (the caller behind a proxy), `RATE_LIMIT_EXEMPT`, `RATE_LIMIT_DENY` and
 * `RATE_LIMIT_MODE` (lib/limit/README.md, "Operator controls").
 *
 * @module
 */

import { type CidrSet, parseCidrSet } from "../http/address.ts";
import type { ForwardedHeader } from "../http/forwarded.ts";
import { controlListProblems } from "../limit/caller/caller_controls.ts";
import { oneOf, type Reader } from "./env.ts";

/** The caller's identity and the operator's controls. */
export interface CallerSettings {
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
}

/** The caller's identity, then the controls (which may not name a trusted proxy). */
export function callerSettings(reader: Reader): CallerSettings {
  const proxies = proxySettings(reader);
  return { ...proxies, ...controlSettings(reader, proxies.trustedProxies) };
}

/** `TRUSTED_PROXIES` and `TRUSTED_PROXY_HEADER`. */
function proxySettings(
  { read, errors }: Reader,
): Pick<CallerSettings, "trustedProxies" | "forwardedHeader"> {
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
): Pick<CallerSettings, "rateLimitExempt" | "rateLimitDeny" | "rateLimitMode"> {
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
