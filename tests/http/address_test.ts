/**
 * IP addresses (`lib/http/address.ts`): every IPv4 and IPv6 spelling read or refused, checked
 * against a reference parser; IPv4-mapped and NAT64 addresses unwrapped; CIDR sets read and matched.
 *
 * @module
 */
import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import {
  cidrSetHas,
  isLocalListener,
  isLoopbackHost,
  parseCidrSet,
  parseIp,
  unmapIpv4,
} from "../../lib/http/address.ts";
import { keyOfIp } from "../../lib/limit/caller/caller_key.ts";

Deno.test("parseIp() reads IPv4 and every IPv6 spelling, and refuses what is not an address", () => {
  const cases: Array<[string, string | undefined]> = [
    ["192.0.2.1", "192.0.2.1"],
    ["::1", "0000:0000:0000:0000::/64"],
    ["2001:db8::1", "2001:0db8:0000:0000::/64"],
    ["2001:DB8:0:0:1:2:3:4", "2001:0db8:0000:0000::/64"],
    ["fe80::1%eth0", "fe80:0000:0000:0000::/64"],
    ["::ffff:192.0.2.1", "0000:0000:0000:0000::/64"],
    ["", undefined],
    ["256.0.0.1", undefined],
    ["01.2.3.4", undefined],
    ["1.2.3", undefined],
    ["1:2:3:4:5:6:7:8:9", undefined],
    ["1::2::3", undefined],
    ["12345::", undefined],
    ["hello", undefined],
  ];
  for (const [text, expected] of cases) {
    const parsed = parseIp(text);
    assert.equal(parsed === undefined ? undefined : keyOfIp(parsed), expected, text);
  }
});

/**
 * The IPv6 parser as it was before it became a single pass (split on "::" and ":", a regular
 * expression per group): the reference the property below holds the fast one to.
 */
function referenceIpv6(input: string): number[] | undefined {
  const zone = input.indexOf("%");
  const text = zone === -1 ? input : input.slice(0, zone);
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const words = (half: string): number[] | undefined => {
    if (half === "") return [];
    const out: number[] = [];
    const groups = half.split(":");
    for (let i = 0; i < groups.length; i++) {
      const group = groups[i]!;
      if (i === groups.length - 1 && group.includes(".")) {
        const v4 = parseIp(group);
        if (!v4 || v4.length !== 4) return undefined;
        out.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!);
      } else if (/^[0-9a-fA-F]{1,4}$/.test(group)) {
        out.push(parseInt(group, 16));
      } else {
        return undefined;
      }
    }
    return out;
  };
  const head = words(halves[0]!);
  const tail = halves.length === 2 ? words(halves[1]!) : [];
  if (!head || !tail) return undefined;
  const missing = 8 - head.length - tail.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  return [...head, ...new Array<number>(missing).fill(0), ...tail];
}

Deno.test("property: parseIp() reads an IPv6 address exactly as the split-based parser did", () => {
  const group = fc.oneof(
    fc.integer({ min: 0, max: 0xffff }).map((v) => v.toString(16)),
    fc.integer({ min: 0, max: 0xffff }).map((v) => v.toString(16).toUpperCase().padStart(4, "0")),
    fc.constantFrom("", "12345", "0g", "1.2.3.4", "01.2.3.4", "255.255.255.255", "1.2.3"),
  );
  const separator = fc.constantFrom(":", ":", ":", "::", ":::");
  const structured = fc.tuple(
    fc.array(fc.tuple(group, separator), { maxLength: 10 }),
    group,
    fc.constantFrom("", "", "%eth0", "%", "%1::2"),
  ).map(([pairs, last, zone]) => pairs.map(([g, s]) => g + s).join("") + last + zone);
  const noise = fc.array(fc.constantFrom(..."0123456789abcdefABCDEFg:.%"), { maxLength: 40 })
    .map((chars) => chars.join(""));
  fc.assert(
    fc.property(fc.oneof(structured, noise), (text) => {
      if (!text.includes(":")) return; // parseIp reads it as IPv4
      const parsed = parseIp(text);
      const expected = referenceIpv6(text);
      const words = parsed &&
        Array.from({ length: 8 }, (_, i) => (parsed[2 * i]! << 8) | parsed[2 * i + 1]!);
      assert.deepEqual(words, expected, text);
    }),
    { numRuns: 20_000 },
  );
});

Deno.test("unmapIpv4() unwraps ::ffff:a.b.c.d, NAT64's 64:ff9b::a.b.c.d and their hex forms, and leaves other IPv6 alone", () => {
  assert.equal(keyOfIp(unmapIpv4(parseIp("::ffff:192.0.2.1")!)), "192.0.2.1");
  assert.equal(keyOfIp(unmapIpv4(parseIp("::ffff:c000:201")!)), "192.0.2.1");
  assert.equal(keyOfIp(unmapIpv4(parseIp("64:ff9b::192.0.2.1")!)), "192.0.2.1");
  assert.equal(keyOfIp(unmapIpv4(parseIp("64:ff9b::c000:201")!)), "192.0.2.1");
  assert.equal(unmapIpv4(parseIp("::1")!).length, 16);
  // Not the well-known /96: a local-use NAT64 prefix (RFC 8215), or bits set in the suffix.
  assert.equal(unmapIpv4(parseIp("64:ff9b:1::192.0.2.1")!).length, 16);
  assert.equal(unmapIpv4(parseIp("64:ff9b::1:192.0.2.1")!).length, 16);
  assert.equal(unmapIpv4(parseIp("::ffff:0:192.0.2.1")!).length, 16);
});

Deno.test("parseCidrSet() reads addresses and ranges and reports what it cannot read", () => {
  const { set, invalid } = parseCidrSet(
    " 10.0.0.0/8 ,192.0.2.1, ::1, 2001:db8::/32, ::ffff:172.16.0.0/108, bad, 10.0.0.0/33, 1.2.3.4/8/9,",
  );
  assert.deepEqual(invalid, ["bad", "10.0.0.0/33", "1.2.3.4/8/9"]);
  const has = (text: string) => cidrSetHas(set, unmapIpv4(parseIp(text)!));
  assert.equal(has("10.255.0.1"), true);
  assert.equal(has("11.0.0.1"), false);
  assert.equal(has("192.0.2.1"), true);
  assert.equal(has("192.0.2.2"), false);
  assert.equal(has("::1"), true);
  assert.equal(has("2001:db8:ffff::1"), true);
  assert.equal(has("2001:db9::1"), false);
  assert.equal(has("172.16.5.5"), true, "a mapped range is matched as IPv4");
  assert.equal(has("172.32.0.1"), false);
});

Deno.test("parseCidrSet() reads the entry unix as peers with no IP address", () => {
  assert.equal(parseCidrSet("10.0.0.0/8, UNIX").set.unix, true);
  assert.equal(parseCidrSet("10.0.0.0/8, UNIX").set.ranges.length, 1);
  assert.equal(parseCidrSet("10.0.0.0/8").set.unix, undefined);
  assert.deepEqual(parseCidrSet("unix:/run/x.sock").invalid, ["unix:/run/x.sock"]);
});

Deno.test("isLoopbackHost() and isLocalListener() say which hosts name this machine, and which listeners a URL calls localhost", () => {
  // [host, loopback, a listener named localhost]: Rust's is_loopback and is_unspecified, which
  // Deno asks (tests/node/http1/request_target_test.ts holds them to real listeners).
  const cases: Array<[string, boolean, boolean]> = [
    ["localhost", true, true],
    ["LOCALHOST", true, true],
    ["127.0.0.1", true, true],
    ["127.255.0.9", true, true],
    ["::1", true, true],
    ["[::1]", true, true],
    ["0:0:0:0:0:0:0:1", true, true],
    ["0.0.0.0", false, true],
    ["::", false, true],
    ["[::]", false, true],
    ["::ffff:127.0.0.1", false, false],
    ["::ffff:0.0.0.0", false, false],
    ["64:ff9b::7f00:1", false, false],
    ["128.0.0.1", false, false],
    ["10.0.0.5", false, false],
    ["2001:db8::5", false, false],
    ["127.foo", false, false],
    ["localhost.example", false, false],
    ["", false, false],
  ];
  for (const [host, loopback, local] of cases) {
    assert.equal(isLoopbackHost(host), loopback, `isLoopbackHost(${JSON.stringify(host)})`);
    assert.equal(isLocalListener(host), local, `isLocalListener(${JSON.stringify(host)})`);
  }
});
