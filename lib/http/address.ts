/**
 * IP addresses as a server sees them: parsing IPv4 and IPv6 text (with or without a port), unwrapping
 * IPv4-mapped and NAT64 addresses, and sets of CIDR ranges, as the trusted-proxy setting lists them.
 * HTTP mechanics with no limiter policy: the configuration and the forwarded-header walk use them
 * (`forwarded.ts`), and the caller key is built from their result (`lib/limit/caller/`).
 *
 * @module
 */

/** The entry of an address list that stands for peers with no IP address (unix socket, vsock). */
export const NO_ADDRESS_ENTRY = "unix";

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

/**
 * The value of the lowercase hex digit with character code `c`, or -1. Addresses accept either case
 * (they fold first); a caller key's words are read from lowercase digits only, its one spelling.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(hexDigit("f".charCodeAt(0)), 15);
 * assert.equal(hexDigit("F".charCodeAt(0)), -1);
 * ```
 */
export function hexDigit(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  return c >= 97 && c <= 102 ? c - 87 : -1;
}

/** The value of the hex digit with character code `c` (either case), or -1. */
function hexValue(c: number): number {
  return hexDigit(c >= 65 && c <= 70 ? c + 32 : c);
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
    if (entry.toLowerCase() === NO_ADDRESS_ENTRY) {
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

/** Loopback: 127.0.0.0/8 and ::1 (an IPv4-mapped address is not matched: see {@linkcode isLoopbackHost}). */
export const LOOPBACK: CidrSet = parseCidrSet("127.0.0.0/8,::1/128").set;

/**
 * Whether `host`, a host name or address as a URL or a listen setting writes it (brackets and case
 * as written), names this machine: `localhost`, or a loopback address (127.0.0.0/8, `::1`). An
 * IPv4-mapped address (`::ffff:127.0.0.1`) is not, as Rust's `is_loopback`, which Deno asks, says.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(isLoopbackHost("127.0.0.2"), true);
 * assert.equal(isLoopbackHost("[::1]"), true);
 * assert.equal(isLoopbackHost("LocalHost"), true);
 * assert.equal(isLoopbackHost("0.0.0.0"), false);
 * assert.equal(isLoopbackHost("localhost.example"), false);
 * ```
 */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (bare === "localhost") return true;
  const bytes = parseIp(bare);
  return bytes !== undefined && cidrSetHas(LOOPBACK, bytes);
}

/**
 * Whether a server listening on `host` is named `localhost` in the URL the runtime builds for a
 * request that named no host: a loopback host ({@linkcode isLoopbackHost}) or an unspecified
 * address (`0.0.0.0`, `::`). Deno's rule (ext/http/request_properties.rs, `req_host_from_addr`:
 * `is_loopback() || is_unspecified()`), measured: a listener on `127.0.0.2` or `::` is named
 * `localhost`, one on `::ffff:127.0.0.1` `[::ffff:127.0.0.1]`. Node's entry writes its URLs by it too.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(isLocalListener("0.0.0.0"), true);
 * assert.equal(isLocalListener("[::]"), true);
 * assert.equal(isLocalListener("::1"), true);
 * assert.equal(isLocalListener("::ffff:127.0.0.1"), false);
 * assert.equal(isLocalListener("2001:db8::5"), false);
 * ```
 */
export function isLocalListener(host: string): boolean {
  if (isLoopbackHost(host)) return true;
  const bytes = parseIp(host.replace(/^\[|\]$/g, ""));
  return bytes !== undefined && bytes.every((byte) => byte === 0);
}

/** Parses `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1` or `[2001:db8::1]:80`. */
export function parseHostPort(text: string): IpBytes | undefined {
  if (text.startsWith("[")) {
    const end = text.indexOf("]");
    return end === -1 ? undefined : parseIpv6(text.slice(1, end));
  }
  const colons = text.split(":").length - 1;
  if (colons === 1) return parseIpv4(text.slice(0, text.indexOf(":")));
  return parseIp(text);
}

/**
 * The first pair of ranges of `a` and `b` that share an address (each written `address/prefix`),
 * or `undefined` when no address is in both sets. Two ranges of one family share an address when
 * they agree on the bits of the shorter prefix.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const proxies = parseCidrSet("10.0.0.0/8").set;
 * assert.deepEqual(cidrSetsOverlap(parseCidrSet("10.1.0.0/16").set, proxies), ["10.1.0.0/16", "10.0.0.0/8"]);
 * assert.equal(cidrSetsOverlap(parseCidrSet("192.0.2.0/24").set, proxies), undefined);
 * ```
 */
export function cidrSetsOverlap(a: CidrSet, b: CidrSet): [string, string] | undefined {
  for (const left of a.ranges) {
    for (const right of b.ranges) {
      if (left.bytes.length !== right.bytes.length) continue;
      const shorter = { bytes: left.bytes, prefix: Math.min(left.prefix, right.prefix) };
      if (cidrSetHas({ ranges: [shorter] }, right.bytes)) {
        return [rangeText(left), rangeText(right)];
      }
    }
  }
  return undefined;
}

/** A range as `address/prefix`, the address in its usual spelling. */
export function rangeText(range: { bytes: IpBytes; prefix: number }): string {
  const { bytes, prefix } = range;
  if (bytes.length === 4) return `${bytes.join(".")}/${prefix}`;
  const words: string[] = [];
  for (let i = 0; i < 16; i += 2) words.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
  // The longest run of zero words (two or more) becomes "::".
  let best = -1, bestLength = 1;
  for (let i = 0; i < 8; i++) {
    let j = i;
    while (j < 8 && words[j] === "0") j++;
    if (j - i > bestLength) [best, bestLength] = [i, j - i];
  }
  const text = best < 0
    ? words.join(":")
    : `${words.slice(0, best).join(":")}::${words.slice(best + bestLength).join(":")}`;
  return `${text}/${prefix}`;
}
