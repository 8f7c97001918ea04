/**
 * The operator's controls over callers: `RATE_LIMIT_EXEMPT` (decided and counted like anyone, never
 * refused), `RATE_LIMIT_DENY` (answered 403 before any store call) and `RATE_LIMIT_MODE=report`
 * (every would-be refusal served). Matched on the caller key as {@linkcode callerKey} builds it: an
 * IPv4 address, or an IPv6 /64, never a header, a user agent or a secret (lib/limit/README.md,
 * "Operator controls").
 *
 * The lists are parsed and checked at start-up by `lib/config/callers.ts` ({@linkcode controlListProblems});
 * a request's verdict is one comparison for the caller of the request before, one map look-up for a
 * recent caller, and a scan of integer ranges for a new one.
 *
 * @module
 */

import { type CidrSet, cidrSetsOverlap, type IpBytes, rangeText } from "../../http/address.ts";
import { KEY_IPV4, KEY_IPV6, parseCallerKey, type ParsedKey } from "./caller_key.ts";

/** A caller that no list names. */
export const CALLER_LIMITED = 0;
/** A caller of `RATE_LIMIT_EXEMPT` (and not of `RATE_LIMIT_DENY`): never refused. */
export const CALLER_EXEMPT = 1;
/** A caller of `RATE_LIMIT_DENY`: answered 403, whatever else lists it. */
export const CALLER_DENIED = 2;

/** Most entries of each list: a scan of a new caller stays within a few microseconds. */
export const MAX_CONTROL_ENTRIES = 4096;

/** The widest IPv6 prefix a caller key holds: callers are counted by their /64. */
const CALLER_IPV6_PREFIX = 64;

/** Most caller keys whose verdict is remembered; beyond it the memo starts again. */
const VERDICT_MEMO_LIMIT = 4096;

/**
 * Why the list of `name` cannot be used as it is, one sentence each: `unix` (every peer without
 * an IP address shares one key), an IPv6 range narrower than /64 (the caller key is the /64, so
 * the entry would name every address of it), a range sharing an address with `TRUSTED_PROXIES` (a
 * request without the forwarded header is keyed as its proxy: the proxy's entry would name every
 * such caller), or more than {@linkcode MAX_CONTROL_ENTRIES} entries.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseCidrSet } from "../../http/address.ts";
 * const proxies = parseCidrSet("127.0.0.1").set;
 * assert.deepEqual(controlListProblems("RATE_LIMIT_EXEMPT", parseCidrSet("192.0.2.0/24").set, proxies), []);
 * assert.match(controlListProblems("RATE_LIMIT_EXEMPT", parseCidrSet("2001:db8::1/128").set, proxies)[0]!, /\/64/);
 * assert.match(controlListProblems("RATE_LIMIT_EXEMPT", parseCidrSet("127.0.0.0/8").set, proxies)[0]!, /TRUSTED_PROXIES/);
 * ```
 */
export function controlListProblems(name: string, list: CidrSet, proxies: CidrSet): string[] {
  const problems: string[] = [];
  if (list.unix) {
    problems.push(
      `${name} may not list unix: every request from a peer without an IP address shares one caller key, so the entry would name all of them; list the client addresses the proxy forwards instead`,
    );
  }
  if (list.ranges.length > MAX_CONTROL_ENTRIES) {
    problems.push(
      `${name} may list at most ${MAX_CONTROL_ENTRIES} addresses or ranges, got ${list.ranges.length}: merge them into wider ranges`,
    );
  }
  const narrow = list.ranges.find((range) =>
    range.bytes.length === 16 && range.prefix > CALLER_IPV6_PREFIX
  );
  if (narrow !== undefined) {
    const wide = rangeText({ bytes: masked(narrow.bytes, 64), prefix: 64 });
    problems.push(
      `${name} may not list ${
        rangeText(narrow)
      }: IPv6 callers are counted by their /64 (the smallest block one subscriber is given), so an entry narrower than /64 would name every address of its /64; write ${wide} or a wider range`,
    );
  }
  const overlap = cidrSetsOverlap(list, proxies);
  if (overlap !== undefined) {
    problems.push(
      `${name} may not name a trusted proxy (${overlap[0]} overlaps TRUSTED_PROXIES' ${
        overlap[1]
      }): a request that reaches it without a forwarded header is keyed by the proxy's address, so the entry would apply to every such caller`,
    );
  }
  return problems;
}

/** `bytes` with every bit after the first `prefix` cleared. */
function masked(bytes: IpBytes, prefix: number): IpBytes {
  const out = bytes.slice();
  for (let bit = prefix; bit < out.length * 8; bit++) {
    out[bit >> 3] = out[bit >> 3]! & ~(0x80 >> (bit & 7));
  }
  return out;
}

/** A list's ranges as integer words, for the scan of a new caller. */
class WordRanges {
  /** IPv4: network and mask, pairs. */
  readonly v4: Int32Array;
  /** IPv6 /64 keys: the prefix's upper and lower words and their masks, fours. */
  readonly v6: Int32Array;

  constructor(set: CidrSet) {
    const v4: number[] = [];
    const v6: number[] = [];
    for (const { bytes, prefix } of set.ranges) {
      if (bytes.length === 4) {
        const mask = maskOf(prefix);
        v4.push(wordOf(bytes, 0) & mask, mask);
      } else {
        const hiMask = maskOf(Math.min(prefix, 32));
        const loMask = maskOf(Math.max(0, Math.min(prefix, 64) - 32));
        v6.push(wordOf(bytes, 0) & hiMask, hiMask, wordOf(bytes, 4) & loMask, loMask);
      }
    }
    this.v4 = Int32Array.from(v4);
    this.v6 = Int32Array.from(v6);
  }

  /** Whether the parsed caller key lies in one of the ranges. */
  has(key: ParsedKey): boolean {
    if (key.kind === KEY_IPV4) {
      const v4 = this.v4;
      for (let i = 0; i < v4.length; i += 2) if ((key.lo & v4[i + 1]!) === v4[i]) return true;
    } else if (key.kind === KEY_IPV6) {
      const v6 = this.v6;
      for (let i = 0; i < v6.length; i += 4) {
        if ((key.hi & v6[i + 1]!) === v6[i] && (key.lo & v6[i + 3]!) === v6[i + 2]) return true;
      }
    }
    return false;
  }
}

/** The 32-bit mask of a prefix of `bits` (0 to 32). */
function maskOf(bits: number): number {
  return bits === 0 ? 0 : (-1 << (32 - bits)) | 0;
}

/** The big-endian 32-bit word of `bytes` at `at`. */
function wordOf(bytes: IpBytes, at: number): number {
  return (bytes[at]! << 24) | (bytes[at + 1]! << 16) | (bytes[at + 2]! << 8) | bytes[at + 3]!;
}

/**
 * The verdict on each caller key of the lists `exempt` and `deny`: {@linkcode CALLER_DENIED} when
 * `deny` names it (deny wins), {@linkcode CALLER_EXEMPT} when `exempt` does, else
 * {@linkcode CALLER_LIMITED}; `undefined` when both lists are empty, so that the handler pays
 * nothing. A key that is not an address (`unix`) is never named.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseCidrSet } from "../../http/address.ts";
 * const verdict = createCallerVerdict(parseCidrSet("192.0.2.0/24, 2001:db8::/48").set, parseCidrSet("192.0.2.66").set)!;
 * assert.equal(verdict("192.0.2.1"), CALLER_EXEMPT);
 * assert.equal(verdict("192.0.2.66"), CALLER_DENIED);
 * assert.equal(verdict("2001:0db8:0000:0007::/64"), CALLER_EXEMPT);
 * assert.equal(verdict("198.51.100.1"), CALLER_LIMITED);
 * assert.equal(createCallerVerdict(parseCidrSet("").set, parseCidrSet("").set), undefined);
 * ```
 */
export function createCallerVerdict(
  exempt: CidrSet,
  deny: CidrSet,
): ((key: string) => number) | undefined {
  if (exempt.ranges.length === 0 && deny.ranges.length === 0) return undefined;
  const exempted = new WordRanges(exempt);
  const denied = new WordRanges(deny);
  const parsed: ParsedKey = { kind: 0, hi: 0, lo: 0 };
  const memo = new Map<string, number>();
  // A busy caller's requests come in a row: its key is compared before the map is read.
  let lastKey = "";
  let lastVerdict = CALLER_LIMITED;
  return (key) => {
    if (key === lastKey) return lastVerdict;
    let verdict = memo.get(key);
    if (verdict === undefined) {
      parseCallerKey(key, parsed);
      verdict = denied.has(parsed)
        ? CALLER_DENIED
        : exempted.has(parsed)
        ? CALLER_EXEMPT
        : CALLER_LIMITED;
      if (memo.size >= VERDICT_MEMO_LIMIT) memo.clear();
      memo.set(key, verdict);
    }
    lastKey = key;
    lastVerdict = verdict;
    return verdict;
  };
}

/** Why a would-be refusal was served: its caller is exempt, or the limit only reports. */
export type ServedRefusal = "exempted" | "report_refused";
