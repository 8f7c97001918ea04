/**
 * The caller key: who a request counts against, and the words a key is held under.
 *
 * The caller is the connection's peer address, or behind a trusted proxy the client the forwarded
 * header names (`lib/http/forwarded.ts` walks it; `lib/http/address.ts` parses addresses). The
 * limiter's policy is here: IPv4-mapped and NAT64 addresses count as their IPv4 address, IPv6 by
 * /64 (the smallest block a single subscriber is normally given), each written in one canonical
 * spelling so that every spelling of one caller gives one key.
 *
 * A peer with no IP address (a unix socket or vsock: a proxy on the same host) says nothing about the
 * caller. Its forwarded header is believed when `TRUSTED_PROXIES` lists `unix`; a request whose caller
 * still has no address is keyed {@linkcode NO_ADDRESS_KEY}, one budget shared by all such requests, and
 * `onNoAddress` is told so that the service can warn.
 *
 * @module
 */

import {
  type CidrSet,
  cidrSetHas,
  hexDigit,
  type IpBytes,
  NO_ADDRESS_ENTRY,
  parseHostPort,
  parseIp,
  unmapIpv4,
} from "../../http/address.ts";
import {
  forwardedClient,
  type ForwardedHeader,
  withinForwardedLength,
} from "../../http/forwarded.ts";

/**
 * The key of every request whose caller has no IP address: a unix-socket or vsock peer that is not
 * trusted, or a trusted one that forwarded no usable client address. One budget for all of them.
 */
export const NO_ADDRESS_KEY = NO_ADDRESS_ENTRY;

/**
 * The peer address of a connection, as a server gives it (Deno's `ServeHandlerInfo`; the Worker
 * makes one from `CF-Connecting-IP`): an IP peer has a `hostname`, a unix-socket or vsock one only
 * its `transport`.
 */
export interface PeerInfo {
  /** The remote address; only `hostname` is used. */
  remoteAddr:
    | { readonly hostname: string; readonly transport?: string; readonly port?: number }
    | {
      readonly transport: string;
      readonly path?: string;
      readonly cid?: number;
      readonly port?: number;
    };
}

/** Options of {@linkcode callerKey}. */
export interface CallerOptions {
  /** Peers whose forwarded header is believed. */
  trustedProxies: CidrSet;
  /** Which forwarded header those peers set. */
  forwardedHeader: ForwardedHeader;
  /** Called each time a request is keyed {@linkcode NO_ADDRESS_KEY}. */
  onNoAddress?: () => void;
}

/**
 * The rate-limit key of an address: the IPv4 address in dotted form, or the IPv6 /64 prefix as
 * `xxxx:xxxx:xxxx:xxxx::/64` (four full hextets, so that every spelling of one network gives one key).
 */
export function keyOfIp(bytes: IpBytes): string {
  if (bytes.length === 4) return `${bytes[0]}.${bytes[1]}.${bytes[2]}.${bytes[3]}`;
  let key = "";
  for (let i = 0; i < 8; i += 2) {
    key += ((bytes[i]! << 8) | bytes[i + 1]!).toString(16).padStart(4, "0") + ":";
  }
  return `${key}:/64`;
}

/**
 * The 32-bit value of a canonical dotted IPv4 address (no leading zeros, as {@linkcode keyOfIp}
 * writes it), or `undefined` for any other text. A caller key that has a value is an IPv4 address.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(ipv4Value("192.0.2.1"), 0xc0000201 | 0);
 * assert.equal(ipv4Value("192.0.2.01"), undefined);
 * ```
 */
export function ipv4Value(key: string): number | undefined {
  const length = key.length;
  if (length < 7 || length > 15) return undefined;
  let value = 0;
  let part = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i < length; i++) {
    const c = key.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      // A leading zero is refused ("010"): that spelling is not canonical.
      if (digits === 1 && part === 0) return undefined;
      part = part * 10 + (c - 48);
      digits++;
    } else if (c === 46 && digits > 0 && part <= 255 && dots < 3) {
      value = (value << 8) | part;
      part = 0;
      digits = 0;
      dots++;
    } else {
      return undefined;
    }
  }
  if (dots !== 3 || digits === 0 || part > 255) return undefined;
  return (value << 8) | part;
}

/** How a caller key is held in words: an IPv4 address (one word), ... */
export const KEY_IPV4 = 1;
/** ... an IPv6 /64 (two words), ... */
export const KEY_IPV6 = 2;
/** ... or any other key, held by its string. */
export const KEY_OTHER = 3;

/** The length of a canonical IPv6 /64 key, `xxxx:xxxx:xxxx:xxxx::/64`. */
const IPV6_KEY_LENGTH = 24;
/** Where its separators are (the other characters are lowercase hex digits). */
const IPV6_COLONS = [4, 9, 14, 19, 20];

/** A parsed caller key: see {@linkcode parseCallerKey}. */
export interface ParsedKey {
  /** {@linkcode KEY_IPV4}, {@linkcode KEY_IPV6} or {@linkcode KEY_OTHER}. */
  kind: number;
  /** The upper word: the /64's first 32 bits, 0 for IPv4. */
  hi: number;
  /** The lower word: the IPv4 address, or the /64's last 32 bits. */
  lo: number;
}

/** Parses four lowercase hex digits at `at`, or returns -1. */
function hextet(key: string, at: number): number {
  let value = 0;
  for (let i = at; i < at + 4; i++) {
    const digit = hexDigit(key.charCodeAt(i));
    if (digit < 0) return -1;
    value = (value << 4) | digit;
  }
  return value;
}

/**
 * The words a caller key is held under: a canonical dotted IPv4 address as its 32-bit value, a
 * canonical IPv6 /64 key (four lowercase four-digit hextets, as `keyOfIp` writes it) as two 32-bit
 * words, anything else as kind 3 (held by its string). Only canonical spellings become words, so
 * distinct keys never share words.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(parseCallerKey("2001:0db8:0001:0002::/64"), { kind: 2, hi: 0x20010db8, lo: 0x00010002 });
 * assert.deepEqual(parseCallerKey("192.0.2.1"), { kind: 1, hi: 0, lo: 0xc0000201 | 0 });
 * assert.equal(parseCallerKey("2001:db8:1:2::/64").kind, 3);
 * ```
 */
export function parseCallerKey(
  key: string,
  into: ParsedKey = { kind: 0, hi: 0, lo: 0 },
): ParsedKey {
  into.hi = 0;
  into.lo = 0;
  const v4 = ipv4Value(key);
  if (v4 !== undefined) {
    into.kind = KEY_IPV4;
    into.lo = v4;
    return into;
  }
  into.kind = KEY_OTHER;
  if (key.length !== IPV6_KEY_LENGTH || !key.endsWith("::/64")) return into;
  for (const at of IPV6_COLONS) if (key.charCodeAt(at) !== 58) return into;
  const a = hextet(key, 0), b = hextet(key, 5), c = hextet(key, 10), d = hextet(key, 15);
  if (a < 0 || b < 0 || c < 0 || d < 0) return into;
  into.kind = KEY_IPV6;
  into.hi = (a << 16) | b;
  into.lo = (c << 16) | d;
  return into;
}

/**
 * The caller key that the words `hi` and `lo` of `kind` {@linkcode KEY_IPV4} or {@linkcode KEY_IPV6}
 * stand for, spelled as {@linkcode keyOfIp} spells it: the inverse of {@linkcode parseCallerKey}.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const { kind, hi, lo } = parseCallerKey("2001:0db8:0001:0002::/64");
 * assert.equal(keyOfWords(kind, hi, lo), "2001:0db8:0001:0002::/64");
 * assert.equal(keyOfWords(KEY_IPV4, 0, 0xc0000201), "192.0.2.1");
 * ```
 */
export function keyOfWords(kind: number, hi: number, lo: number): string {
  if (kind === KEY_IPV4) return `${lo >>> 24}.${(lo >>> 16) & 255}.${(lo >>> 8) & 255}.${lo & 255}`;
  return `${hextets(hi)}:${hextets(lo)}::/64`;
}

/** Two hextets of a 32-bit word, `xxxx:xxxx`, lowercase and padded. */
function hextets(word: number): string {
  const s = (word >>> 0).toString(16).padStart(8, "0");
  return `${s.slice(0, 4)}:${s.slice(4)}`;
}

/**
 * The rate-limit key of a request.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseCidrSet } from "../../http/address.ts";
 * const options = { trustedProxies: parseCidrSet("").set, forwardedHeader: "x-forwarded-for" } as const;
 * const peer = { remoteAddr: { hostname: "2001:db8:1:2:3:4:5:6" } };
 * assert.equal(callerKey(new Headers(), peer, options), "2001:0db8:0001:0002::/64");
 * ```
 */
export function callerKey(
  headers: Pick<Headers, "get">,
  info: PeerInfo,
  options: CallerOptions,
): string {
  const addr = info.remoteAddr;
  if (!("hostname" in addr)) return noAddressKey(headers, options);
  const hostname = addr.hostname;
  // The common case, a plain IPv4 peer and no trusted proxies, needs no parsing.
  if (options.trustedProxies.ranges.length === 0 && !hostname.includes(":")) return hostname;
  const peer = parseIp(hostname);
  if (!peer) return hostname;
  const bytes = unmapIpv4(peer);
  if (options.trustedProxies.ranges.length === 0 || !cidrSetHas(options.trustedProxies, bytes)) {
    return keyOfIp(bytes);
  }
  return keyOfIp(forwardedClient(headers, bytes, options.trustedProxies, options.forwardedHeader)!);
}

/** The key of a request from a peer with no IP address (see the module comment). */
function noAddressKey(headers: Pick<Headers, "get">, options: CallerOptions): string {
  const client = options.trustedProxies.unix
    ? forwardedClient(headers, undefined, options.trustedProxies, options.forwardedHeader)
    : undefined;
  if (client !== undefined) return keyOfIp(client);
  options.onNoAddress?.();
  return NO_ADDRESS_KEY;
}

/**
 * What {@linkcode createCallerKey} remembers about a peer address: one shape for every peer. Its
 * fields are declared and assigned, not parameter properties, which Node's type stripping cannot
 * remove (lib/node/).
 */
class PeerFacts {
  readonly key: string;
  readonly trusted: boolean;
  constructor(key: string, trusted: boolean) {
    this.key = key;
    this.trusted = trusted;
  }
}

/** Most peer addresses a {@linkcode createCallerKey} function remembers; beyond it it starts again. */
const PEER_MEMO_LIMIT = 4096;

/**
 * A {@linkcode callerKey} for fixed options, for the hot path: it remembers what it learnt about each
 * peer address (its key, whether it is a trusted proxy: tests/bench/README.md, "Tried and not
 * kept", has the figures), and takes a single `X-Forwarded-For` entry that is
 * already a canonical IPv4 address as the key without parsing it. Every answer equals
 * `callerKey(headers, info, options)`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseCidrSet } from "../../http/address.ts";
 * const keyOf = createCallerKey({ trustedProxies: parseCidrSet("10.0.0.0/8").set, forwardedHeader: "x-forwarded-for" });
 * const proxy = { remoteAddr: { hostname: "10.0.0.1" } };
 * assert.equal(keyOf(new Headers({ "x-forwarded-for": "192.0.2.7" }), proxy), "192.0.2.7");
 * ```
 */
export function createCallerKey(
  options: CallerOptions,
): (headers: Pick<Headers, "get">, info: PeerInfo) => string {
  if (options.trustedProxies.ranges.length === 0) {
    return (headers, info) => callerKey(headers, info, options);
  }
  const peers = new Map<string, PeerFacts>();
  const xff = options.forwardedHeader === "x-forwarded-for";
  // The last request's peer is compared before the map is read: behind a proxy nearly every
  // request comes from the same few peers (tests/bench/README.md, "Tried and not kept").
  let lastHostname = "";
  let lastPeer: PeerFacts | undefined;
  return (headers, info) => {
    const addr = info.remoteAddr;
    if (!("hostname" in addr)) return noAddressKey(headers, options);
    const hostname = addr.hostname;
    let peer = hostname === lastHostname ? lastPeer : peers.get(hostname);
    if (peer === undefined) {
      peer = peerFacts(hostname, options.trustedProxies);
      if (peers.size >= PEER_MEMO_LIMIT) peers.clear();
      peers.set(hostname, peer);
    }
    lastHostname = hostname;
    lastPeer = peer;
    if (!peer.trusted) return peer.key;
    if (xff) {
      // One entry that is a canonical IPv4 address: the walk would stop at it whether it is trusted
      // or not, and its key is itself.
      const value = withinForwardedLength(headers.get("x-forwarded-for"));
      if (value !== null && ipv4Value(value) !== undefined) return value;
      // Any other single entry: the walk ends at it too (its key), or at the proxy when it is not
      // an address; no need to parse the peer again.
      if (value !== null && !value.includes(",")) {
        const client = parseHostPort(value.trim());
        return client ? keyOfIp(unmapIpv4(client)) : peer.key;
      }
    }
    return callerKey(headers, info, options);
  };
}

/** What a peer address is: its key, and whether it is one of the trusted proxies. */
function peerFacts(hostname: string, trustedProxies: CidrSet): PeerFacts {
  const parsed = parseIp(hostname);
  const bytes = parsed && unmapIpv4(parsed);
  return bytes
    ? new PeerFacts(keyOfIp(bytes), cidrSetHas(trustedProxies, bytes))
    : new PeerFacts(hostname, false);
}
