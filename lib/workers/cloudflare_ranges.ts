/**
 * Cloudflare's own address ranges, as it publishes them (https://www.cloudflare.com/ips/, the lists
 * `ips-v4` and `ips-v6`; read 2026-11-27): the addresses its edge and its Workers connect from.
 *
 * On Workers, `CF-Connecting-IP` is one of these when the caller is Cloudflare itself: another
 * zone's Worker arrives as `2a06:98c0:3600::103` (in `2a06:98c0::/29`), its `X-Forwarded-For`
 * written by that Worker. A `TRUSTED_PROXIES` that covers any of them lets such a caller name a
 * fresh caller key per request (`worker_rules.ts` refuses it). The list changes rarely; a range
 * Cloudflare adds later is not refused here until it is added.
 *
 * @module
 */

import { type CidrSet, parseCidrSet } from "../http/address.ts";

/** Cloudflare's published IPv4 and IPv6 ranges (https://www.cloudflare.com/ips/). */
export const CLOUDFLARE_RANGES = [
  "173.245.48.0/20",
  "103.21.244.0/22",
  "103.22.200.0/22",
  "103.31.4.0/22",
  "141.101.64.0/18",
  "108.162.192.0/18",
  "190.93.240.0/20",
  "188.114.96.0/20",
  "197.234.240.0/22",
  "198.41.128.0/17",
  "162.158.0.0/15",
  "104.16.0.0/13",
  "104.24.0.0/14",
  "172.64.0.0/13",
  "131.0.72.0/22",
  "2400:cb00::/32",
  "2606:4700::/32",
  "2803:f800::/32",
  "2405:b500::/32",
  "2405:8100::/32",
  "2a06:98c0::/29",
  "2c0f:f248::/32",
] as const;

/**
 * {@linkcode CLOUDFLARE_RANGES} as a set of ranges.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cidrSetHas, parseIp } from "../http/address.ts";
 * // Another zone's Worker arrives from Cloudflare's Workers address.
 * assert.ok(cidrSetHas(cloudflareRanges(), parseIp("2a06:98c0:3600::103")!));
 * assert.ok(!cidrSetHas(cloudflareRanges(), parseIp("192.0.2.1")!));
 * ```
 */
export function cloudflareRanges(): CidrSet {
  return parseCidrSet(CLOUDFLARE_RANGES.join(",")).set;
}
