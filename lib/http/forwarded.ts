/**
 * The forwarded-header walk: which client a chain of trusted proxies names in `X-Forwarded-For` or
 * `Forwarded` (RFC 7239). Walked from the right, so that a client cannot choose its own address by
 * prepending entries, and bounded in length and hops, so that no header costs more than a short one.
 * HTTP mechanics with no limiter policy (the caller key uses it: `lib/limit/caller/caller_key.ts`).
 *
 * @module
 */

import { type CidrSet, cidrSetHas, type IpBytes, parseHostPort, unmapIpv4 } from "./address.ts";

/** Which forwarded header carries the client address when the peer is a trusted proxy. */
export type ForwardedHeader = "x-forwarded-for" | "forwarded";

/**
 * The most of a forwarded header read, from its right end: the entries a trusted proxy appends are
 * at the right, and the walk from the right stops at the first one that is not a trusted proxy, so
 * a longer value's left part (what a client wrote itself) is never needed. Its first entry, cut,
 * is dropped.
 */
export const MAX_FORWARDED_LENGTH = 1024;

/**
 * The most entries of a forwarded header walked from the right: a chain of more trusted proxies
 * than this ends the walk at the last one reached, as an unparseable entry does.
 */
export const MAX_FORWARDED_HOPS = 32;

/**
 * The right end of a forwarded header's value: the whole value up to
 * {@linkcode MAX_FORWARDED_LENGTH} characters, else its last ones from the first whole entry.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(forwardedTail("192.0.2.1, 10.0.0.1"), "192.0.2.1, 10.0.0.1");
 * assert.equal(forwardedTail("1".repeat(5000) + ", 192.0.2.7"), " 192.0.2.7");
 * ```
 */
export function forwardedTail(value: string): string {
  if (value.length <= MAX_FORWARDED_LENGTH) return value;
  const tail = value.slice(value.length - MAX_FORWARDED_LENGTH);
  const comma = tail.indexOf(",");
  return comma === -1 ? "" : tail.slice(comma + 1);
}

/**
 * Walks the forwarded chain of `header` from the right, past the proxies of `trusted`, to the first
 * address that is not one. An unparseable entry stops the walk at the proxy that relayed it: nobody
 * can be keyed by a string of their choosing. `peer` is undefined for a peer with no IP address:
 * then so is the answer when the header names no address.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseCidrSet, parseIp } from "./address.ts";
 * const trusted = parseCidrSet("10.0.0.0/8").set;
 * const headers = new Headers({ "x-forwarded-for": "192.0.2.7, 10.0.0.2" });
 * const client = forwardedClient(headers, parseIp("10.0.0.1"), trusted, "x-forwarded-for");
 * assert.deepEqual(client, parseIp("192.0.2.7"));
 * ```
 */
export function forwardedClient(
  headers: Pick<Headers, "get">,
  peer: IpBytes | undefined,
  trusted: CidrSet,
  header: ForwardedHeader,
): IpBytes | undefined {
  const whole = headers.get(header);
  if (whole === null) return peer;
  const value = forwardedTail(whole);
  const entries = header === "forwarded" ? forwardedFor(value) : value.split(",");
  let client = peer;
  const last = Math.max(0, entries.length - MAX_FORWARDED_HOPS);
  for (let i = entries.length - 1; i >= last; i--) {
    const parsed = parseHostPort(entries[i]!.trim());
    if (!parsed) return client;
    client = unmapIpv4(parsed);
    if (!cidrSetHas(trusted, client)) return client;
  }
  return client;
}

/** The `for=` values of a `Forwarded` header (RFC 7239), in order. */
function forwardedFor(value: string): string[] {
  const out: string[] = [];
  for (const element of value.split(",")) {
    let found = "";
    for (const pair of element.split(";")) {
      const eq = pair.indexOf("=");
      if (eq !== -1 && pair.slice(0, eq).trim().toLowerCase() === "for") {
        found = pair.slice(eq + 1).trim().replace(/^"(.*)"$/, "$1");
      }
    }
    out.push(found);
  }
  return out;
}

/**
 * `value` when it is within {@linkcode MAX_FORWARDED_LENGTH}, else `null`: a fast path reads only
 * such a value whole; a longer one takes the walk, which cuts it.
 */
export function withinForwardedLength(value: string | null): string | null {
  return value !== null && value.length > MAX_FORWARDED_LENGTH ? null : value;
}
