/**
 * Tests of caller keys: address parsing, IPv4-mapped unwrapping, /64 grouping, trusted proxies and
 * log truncation.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  callerKey,
  type CallerOptions,
  cidrSetHas,
  keyOfIp,
  parseCidrSet,
  parseIp,
  truncatedAddress,
  unmapIpv4,
} from "../lib/caller.ts";

const NO_PROXIES: CallerOptions = {
  trustedProxies: parseCidrSet("").set,
  forwardedHeader: "x-forwarded-for",
};

function peer(hostname: string) {
  return { remoteAddr: { transport: "tcp" as const, hostname, port: 40_000 } };
}

function key(hostname: string, headers: Record<string, string> = {}, options = NO_PROXIES): string {
  return callerKey(new Headers(headers), peer(hostname), options);
}

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

Deno.test("unmapIpv4() unwraps ::ffff:a.b.c.d and its hex form, and leaves other IPv6 alone", () => {
  assert.equal(keyOfIp(unmapIpv4(parseIp("::ffff:192.0.2.1")!)), "192.0.2.1");
  assert.equal(keyOfIp(unmapIpv4(parseIp("::ffff:c000:201")!)), "192.0.2.1");
  assert.equal(unmapIpv4(parseIp("::1")!).length, 16);
  assert.equal(unmapIpv4(parseIp("64:ff9b::192.0.2.1")!).length, 16);
});

Deno.test("callerKey() is the peer address; IPv4-mapped peers share the IPv4 key", () => {
  assert.equal(key("203.0.113.7"), "203.0.113.7");
  assert.equal(key("::ffff:203.0.113.7"), "203.0.113.7");
});

Deno.test("callerKey() groups IPv6 peers by /64", () => {
  assert.equal(key("2001:db8:aa:bb:1::1"), key("2001:db8:aa:bb:ffff:ffff:ffff:ffff"));
  assert.notEqual(key("2001:db8:aa:bb::1"), key("2001:db8:aa:bc::1"));
  assert.equal(key("2001:db8:aa:bb::1"), "2001:0db8:00aa:00bb::/64");
});

Deno.test("callerKey() ignores forwarded headers when no proxy is trusted", () => {
  assert.equal(key("203.0.113.7", { "x-forwarded-for": "198.51.100.1" }), "203.0.113.7");
  assert.equal(key("203.0.113.7", { forwarded: "for=198.51.100.1" }), "203.0.113.7");
});

Deno.test("callerKey() walks X-Forwarded-For from the right, past trusted proxies only", () => {
  const options: CallerOptions = {
    trustedProxies: parseCidrSet("10.0.0.0/8, 2001:db8:ffff::/48").set,
    forwardedHeader: "x-forwarded-for",
  };
  const cases: Array<[string, Record<string, string>, string]> = [
    // A spoofed left-most entry is never reached: the first untrusted address from the right wins.
    ["10.0.0.1", { "x-forwarded-for": "1.1.1.1, 198.51.100.9, 10.0.0.2" }, "198.51.100.9"],
    ["10.0.0.1", { "x-forwarded-for": "198.51.100.9" }, "198.51.100.9"],
    ["10.0.0.1", { "x-forwarded-for": "198.51.100.9:4711" }, "198.51.100.9"],
    ["10.0.0.1", { "x-forwarded-for": "[2001:db8:1:2::9]:80" }, "2001:0db8:0001:0002::/64"],
    ["10.0.0.1", { "x-forwarded-for": "::ffff:198.51.100.9" }, "198.51.100.9"],
    ["::ffff:10.0.0.1", { "x-forwarded-for": "198.51.100.9" }, "198.51.100.9"],
    ["2001:db8:ffff:1::1", { "x-forwarded-for": "198.51.100.9" }, "198.51.100.9"],
    // No header: the proxy itself is the caller.
    ["10.0.0.1", {}, "10.0.0.1"],
    // Everything trusted: the left-most address.
    ["10.0.0.1", { "x-forwarded-for": "10.1.1.1, 10.2.2.2" }, "10.1.1.1"],
    // Garbage stops the walk at the proxy that relayed it.
    ["10.0.0.1", { "x-forwarded-for": "198.51.100.9, nonsense, 10.0.0.3" }, "10.0.0.3"],
    ["10.0.0.1", { "x-forwarded-for": "nonsense" }, "10.0.0.1"],
    // An untrusted peer's header is ignored.
    ["203.0.113.7", { "x-forwarded-for": "198.51.100.9" }, "203.0.113.7"],
  ];
  for (const [hostname, headers, expected] of cases) {
    assert.equal(
      key(hostname, headers, options),
      expected,
      `${hostname} ${JSON.stringify(headers)}`,
    );
  }
});

Deno.test("callerKey() reads Forwarded (RFC 7239) when configured to", () => {
  const options: CallerOptions = {
    trustedProxies: parseCidrSet("10.0.0.0/8").set,
    forwardedHeader: "forwarded",
  };
  assert.equal(
    key("10.0.0.1", {
      forwarded: 'for=1.1.1.1, for="[2001:db8:5:6::1]:4711";proto=https, for=10.0.0.2',
    }, options),
    "2001:0db8:0005:0006::/64",
  );
  assert.equal(key("10.0.0.1", { forwarded: "for=unknown" }, options), "10.0.0.1");
  assert.equal(key("10.0.0.1", { "x-forwarded-for": "198.51.100.9" }, options), "10.0.0.1");
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

Deno.test("truncatedAddress() keeps /24 of IPv4 and /48 of IPv6, never the whole address", () => {
  assert.equal(truncatedAddress("203.0.113.77"), "203.0.113.0");
  assert.equal(truncatedAddress("::ffff:203.0.113.77"), "203.0.113.0");
  assert.equal(truncatedAddress("2001:db8:aa:bb::1"), "2001:db8:aa::");
  assert.equal(truncatedAddress("not an address"), "unknown");
});
