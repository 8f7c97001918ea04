/**
 * Who is calling: the rate-limit key of a request and the truncated address the access log keeps.
 *
 * The caller is the connection's peer address. Forwarded headers are believed only when the peer is a
 * trusted proxy, and are walked from the right so that a client cannot choose its own key by
 * prepending addresses. IPv4-mapped IPv6 addresses are unwrapped, and IPv6 is grouped by /64, the
 * smallest block a single subscriber is normally given.
 *
 * A peer with no IP address (a unix socket or vsock: a proxy on the same host) says nothing about the
 * caller. Its forwarded header is believed when `TRUSTED_PROXIES` lists `unix`; a request whose caller
 * still has no address is keyed {@linkcode NO_ADDRESS_KEY}, one budget shared by all such requests, and
 * `onNoAddress` is told so that the service can warn.
 *
 * @module
 */

/** Which forwarded header carries the client address when the peer is a trusted proxy. */
export type ForwardedHeader = "x-forwarded-for" | "forwarded";

/** A parsed address: 4 bytes (IPv4) or 16 bytes (IPv6). */
export type IpBytes = Uint8Array;

/** A set of CIDR ranges, matched by {@linkcode cidrSetHas}, and whether peers without an IP belong. */
export interface CidrSet {
  /** The ranges: network bytes and prefix length. */
  readonly ranges: ReadonlyArray<{ bytes: IpBytes; prefix: number }>;
  /** Whether a peer with no IP address (unix socket, vsock) is in the set: the entry `unix`. */
  readonly unix?: boolean;
}

/**
 * The key of every request whose caller has no IP address: a unix-socket or vsock peer that is not
 * trusted, or a trusted one that forwarded no usable client address. One budget for all of them.
 */
export const NO_ADDRESS_KEY = "unix";

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
 * Parses an IPv4 or IPv6 address (no brackets, no port, an optional IPv6 zone is ignored).
 *
 * @returns the bytes, or `undefined` if `text` is not an address
 */
export function parseIp(text: string): IpBytes | undefined {
  return text.includes(":") ? parseIpv6(text) : parseIpv4(text);
}

function parseIpv4(text: string): IpBytes | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  const bytes = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const part = parts[i]!;
    // Leading zeros are refused: some parsers read them as octal.
    if (!/^(0|[1-9]\d{0,2})$/.test(part)) return undefined;
    const value = Number(part);
    if (value > 255) return undefined;
    bytes[i] = value;
  }
  return bytes;
}

/** Most 16-bit words in an IPv6 address. */
const IPV6_WORDS = 8;
/** Most hex digits in one group of an IPv6 address. */
const MAX_GROUP_DIGITS = 4;
/** Character codes the IPv6 parser reads. */
const COLON = 58;
const DOT = 46;
/**
 * The IPv6 parser's words, reused by every call: a typed array per call cost more than the rest
 * of the parse (about 0.4 µs each in Deno 2.9.6).
 */
const HEAD_WORDS: number[] = new Array<number>(IPV6_WORDS).fill(0);
const TAIL_WORDS: number[] = new Array<number>(IPV6_WORDS).fill(0);

/** The value of the hex digit with character code `c` (either case), or -1. */
function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  const lower = c | 0x20;
  return lower >= 97 && lower <= 102 ? lower - 87 : -1;
}

/**
 * Parses one side of an IPv6 address's `::` (`text` from `start` to `end`): groups of one to four
 * hex digits separated by single colons, the last of which may be a dotted IPv4 address (two
 * words). Writes the words into `out` from its start, in one pass without splitting the text (this runs
 * for every request of an IPv6 caller).
 *
 * @returns the number of words, or -1 if the side is not well formed
 */
function ipv6Half(text: string, start: number, end: number, out: number[]): number {
  if (start === end) return 0;
  let n = 0;
  let group = start;
  for (let i = start; i <= end; i++) {
    const c = i < end ? text.charCodeAt(i) : COLON;
    if (c === DOT) {
      // An embedded IPv4 address: only as the last group of this side.
      const colon = text.indexOf(":", group);
      if (colon !== -1 && colon < end) return -1;
      const v4 = parseIpv4(text.slice(group, end));
      if (!v4 || n + 2 > IPV6_WORDS) return -1;
      out[n++] = (v4[0]! << 8) | v4[1]!;
      out[n++] = (v4[2]! << 8) | v4[3]!;
      return n;
    }
    if (c !== COLON) continue;
    const digits = i - group;
    if (digits < 1 || digits > MAX_GROUP_DIGITS || n >= IPV6_WORDS) return -1;
    let word = 0;
    for (let j = group; j < i; j++) {
      const value = hexValue(text.charCodeAt(j));
      if (value < 0) return -1;
      word = (word << 4) | value;
    }
    out[n++] = word;
    group = i + 1;
  }
  return n;
}

function parseIpv6(input: string): IpBytes | undefined {
  const zone = input.indexOf("%");
  const end = zone === -1 ? input.length : zone;
  // The first "::"; a second one, or ":::", leaves an empty group in the tail, which is refused.
  const gap = input.indexOf("::");
  const bytes = new Uint8Array(16);
  if (gap === -1 || gap >= end) {
    if (ipv6Half(input, 0, end, HEAD_WORDS) !== IPV6_WORDS) return undefined;
    writeWords(bytes, HEAD_WORDS, 0, IPV6_WORDS);
    return bytes;
  }
  const head = ipv6Half(input, 0, gap, HEAD_WORDS);
  if (head < 0) return undefined;
  const tail = ipv6Half(input, gap + 2, end, TAIL_WORDS);
  if (tail < 0 || head + tail >= IPV6_WORDS) return undefined;
  writeWords(bytes, HEAD_WORDS, 0, head);
  writeWords(bytes, TAIL_WORDS, IPV6_WORDS - tail, tail);
  return bytes;
}

/** Writes `count` words into `bytes` from word `at`, high byte first. */
function writeWords(bytes: IpBytes, words: number[], at: number, count: number): void {
  for (let i = 0; i < count; i++) {
    bytes[2 * (at + i)] = words[i]! >> 8;
    bytes[2 * (at + i) + 1] = words[i]! & 0xff;
  }
}

/**
 * Unwraps an IPv6 address that carries an IPv4 one to that IPv4 address: IPv4-mapped
 * (`::ffff:192.0.2.1`) and NAT64's well-known prefix (`64:ff9b::192.0.2.1`, RFC 6052: an IPv6-only
 * client reaching an IPv4 service through a NAT64 gateway, so one IPv4 host whichever way it came).
 * Other addresses are returned as they are.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.deepEqual(unmapIpv4(parseIp("64:ff9b::c000:207")!), parseIp("192.0.2.7"));
 * assert.deepEqual(unmapIpv4(parseIp("::ffff:192.0.2.7")!), parseIp("192.0.2.7"));
 * assert.equal(unmapIpv4(parseIp("2001:db8::1")!).length, 16);
 * ```
 */
export function unmapIpv4(bytes: IpBytes): IpBytes {
  if (bytes.length !== 16) return bytes;
  const nat64 = bytes[0] === 0 && bytes[1] === 0x64 && bytes[2] === 0xff && bytes[3] === 0x9b;
  for (let i = nat64 ? 4 : 0; i < 10; i++) if (bytes[i] !== 0) return bytes;
  const marker = nat64 ? 0 : 0xff;
  if (bytes[10] !== marker || bytes[11] !== marker) return bytes;
  return bytes.slice(12);
}

/**
 * Parses a comma-separated list of addresses and CIDR ranges (`10.0.0.0/8, ::1, 2001:db8::/32`); the
 * entry `unix` stands for peers with no IP address (unix sockets, vsock).
 *
 * @returns the set, and the entries that could not be parsed
 */
export function parseCidrSet(list: string): { set: CidrSet; invalid: string[] } {
  const ranges: Array<{ bytes: IpBytes; prefix: number }> = [];
  const invalid: string[] = [];
  let unix = false;
  for (const raw of list.split(",")) {
    const entry = raw.trim();
    if (entry === "") continue;
    if (entry.toLowerCase() === NO_ADDRESS_KEY) {
      unix = true;
      continue;
    }
    const [address = "", prefixText, extra] = entry.split("/");
    const parsed = parseIp(address);
    if (!parsed || extra !== undefined) {
      invalid.push(entry);
      continue;
    }
    const bytes = unmapIpv4(parsed);
    const max = bytes.length * 8;
    const mappedShift = parsed.length - bytes.length === 12 ? 96 : 0;
    const prefix = prefixText === undefined
      ? max
      : /^\d{1,3}$/.test(prefixText)
      ? Number(prefixText) - mappedShift
      : NaN;
    if (!(prefix >= 0 && prefix <= max)) {
      invalid.push(entry);
      continue;
    }
    ranges.push({ bytes, prefix });
  }
  return { set: unix ? { ranges, unix } : { ranges }, invalid };
}

/** Whether `bytes` (already unmapped) lies in one of the ranges of `set`. */
export function cidrSetHas(set: CidrSet, bytes: IpBytes): boolean {
  for (const { bytes: net, prefix } of set.ranges) {
    if (net.length !== bytes.length) continue;
    const whole = prefix >> 3;
    let inside = true;
    for (let i = 0; i < whole; i++) {
      if (net[i] !== bytes[i]) {
        inside = false;
        break;
      }
    }
    if (!inside) continue;
    const rest = prefix & 7;
    if (rest === 0) return true;
    const mask = (0xff << (8 - rest)) & 0xff;
    if (((net[whole]! ^ bytes[whole]!) & mask) === 0) return true;
  }
  return false;
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

/**
 * The rate-limit key of a request.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
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
  return keyOfIp(forwardedClient(headers, bytes, options)!);
}

/** The key of a request from a peer with no IP address (see the module comment). */
function noAddressKey(headers: Pick<Headers, "get">, options: CallerOptions): string {
  const client = options.trustedProxies.unix
    ? forwardedClient(headers, undefined, options)
    : undefined;
  if (client !== undefined) return keyOfIp(client);
  options.onNoAddress?.();
  return NO_ADDRESS_KEY;
}

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

/** What {@linkcode createCallerKey} remembers about a peer address: one shape for every peer. */
class PeerFacts {
  constructor(readonly key: string, readonly trusted: boolean) {}
}

/** Most peer addresses a {@linkcode createCallerKey} function remembers; beyond it it starts again. */
const PEER_MEMO_LIMIT = 4096;

/**
 * A {@linkcode callerKey} for fixed options, for the hot path: it remembers what it learnt about each
 * peer address (its key, whether it is a trusted proxy; worth 5-10% behind a trusted proxy, paired:
 * tests/bench/README.md, "Tried and not kept"), and takes a single `X-Forwarded-For` entry that is
 * already a canonical IPv4 address as the key without parsing it. Every answer equals
 * `callerKey(headers, info, options)`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
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
  // The peer of the last request, checked before the map: behind a proxy nearly every request
  // comes from the same few peers, and a comparison costs less than hashing a new string. With the
  // response cache's last template, worth 6% to the hot caller, paired (tests/bench/README.md,
  // "Tried and not kept"); neither alone is told apart from noise.
  let lastHostname = "";
  let lastPeer: PeerFacts | undefined;
  return (headers, info) => {
    const addr = info.remoteAddr;
    if (!("hostname" in addr)) return noAddressKey(headers, options);
    const hostname = addr.hostname;
    let peer = hostname === lastHostname ? lastPeer : peers.get(hostname);
    if (peer === undefined) {
      const parsed = parseIp(hostname);
      const bytes = parsed && unmapIpv4(parsed);
      peer = bytes
        ? new PeerFacts(keyOfIp(bytes), cidrSetHas(options.trustedProxies, bytes))
        : new PeerFacts(hostname, false);
      if (peers.size >= PEER_MEMO_LIMIT) peers.clear();
      peers.set(hostname, peer);
    }
    lastHostname = hostname;
    lastPeer = peer;
    if (!peer.trusted) return peer.key;
    if (xff) {
      // One entry that is a canonical IPv4 address: the walk would stop at it whether it is trusted
      // or not, and its key is itself.
      const value = bounded(headers.get("x-forwarded-for"));
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

/**
 * Walks the forwarded chain from the right, past trusted proxies, to the first address that is not
 * one. An unparseable entry stops the walk at the proxy that relayed it: nobody can be keyed by a
 * string of their choosing. `peer` is undefined for a peer with no IP address: then so is the
 * answer when the header names no address.
 */
function forwardedClient(
  headers: Pick<Headers, "get">,
  peer: IpBytes | undefined,
  options: CallerOptions,
): IpBytes | undefined {
  const whole = headers.get(options.forwardedHeader);
  if (whole === null) return peer;
  const value = forwardedTail(whole);
  const entries = options.forwardedHeader === "forwarded" ? forwardedFor(value) : value.split(",");
  let client = peer;
  const last = Math.max(0, entries.length - MAX_FORWARDED_HOPS);
  for (let i = entries.length - 1; i >= last; i--) {
    const parsed = parseHostPort(entries[i]!.trim());
    if (!parsed) return client;
    client = unmapIpv4(parsed);
    if (!cidrSetHas(options.trustedProxies, client)) return client;
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

/** `value` when it is within {@linkcode MAX_FORWARDED_LENGTH}, else `null` (the slow path cuts it). */
function bounded(value: string | null): string | null {
  return value !== null && value.length > MAX_FORWARDED_LENGTH ? null : value;
}

/** Parses `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1` or `[2001:db8::1]:80`. */
function parseHostPort(text: string): IpBytes | undefined {
  if (text.startsWith("[")) {
    const end = text.indexOf("]");
    return end === -1 ? undefined : parseIpv6(text.slice(1, end));
  }
  const colons = text.split(":").length - 1;
  if (colons === 1) return parseIpv4(text.slice(0, text.indexOf(":")));
  return parseIp(text);
}

/**
 * The address the access log keeps: IPv4 truncated to /24 (`192.0.2.0`), IPv6 to /48 (`2001:db8:1::`).
 * The log never holds a full client address.
 */
export function truncatedAddress(hostname: string): string {
  const parsed = parseIp(hostname);
  if (!parsed) return "unknown";
  const bytes = unmapIpv4(parsed);
  if (bytes.length === 4) return `${bytes[0]}.${bytes[1]}.${bytes[2]}.0`;
  const words: string[] = [];
  for (let i = 0; i < 6; i += 2) words.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
  return `${words.join(":")}::`;
}
