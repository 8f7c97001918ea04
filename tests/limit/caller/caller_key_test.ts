/**
 * Tests of caller keys: address parsing, IPv4-mapped unwrapping, /64 grouping, trusted proxies, log
 * truncation, and peers with no IP address (unix sockets), also through a real unix-socket server.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import { createHandler } from "../../../lib/handler.ts";
import {
  callerKey,
  type CallerOptions,
  cidrSetHas,
  createCallerKey,
  ipv4Value,
  keyOfIp,
  NO_ADDRESS_KEY,
  parseCidrSet,
  parseIp,
  truncatedAddress,
  unmapIpv4,
} from "../../../lib/limit/caller/caller_key.ts";
import { MemoryStore } from "../../../lib/limit/memory/memory_store.ts";
import { testConfig, testContent } from "../../_server.ts";

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

Deno.test("callerKey() keys a NAT64 peer, or a NAT64 client behind a trusted proxy, as the IPv4 address it carries", () => {
  assert.equal(key("64:ff9b::203.0.113.7"), "203.0.113.7");
  assert.equal(key("64:ff9b::cb00:7107"), key("203.0.113.7"));
  const options = {
    trustedProxies: parseCidrSet("10.0.0.0/8").set,
    forwardedHeader: "x-forwarded-for",
  } as const;
  const proxy = { remoteAddr: { hostname: "10.0.0.1" } };
  const keyOf = createCallerKey(options);
  assert.equal(
    keyOf(new Headers({ "x-forwarded-for": "64:ff9b::203.0.113.7" }), proxy),
    "203.0.113.7",
  );
  assert.equal(truncatedAddress("64:ff9b::203.0.113.7"), "203.0.113.0");
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

// ---------------------------------------------------------------------------------------------------
// Peers with no IP address

const UNIX_PEER = { remoteAddr: { transport: "unix" as const, path: "/run/discovery.sock" } };

Deno.test("a peer with no IP address is keyed as one shared caller, and each such request is reported", () => {
  const cases: Array<[string, string, Record<string, string>, string, number]> = [
    // [TRUSTED_PROXIES, header, request headers, key, reports]
    ["", "x-forwarded-for", {}, NO_ADDRESS_KEY, 1],
    ["", "x-forwarded-for", { "x-forwarded-for": "192.0.2.7" }, NO_ADDRESS_KEY, 1],
    ["10.0.0.0/8", "x-forwarded-for", { "x-forwarded-for": "192.0.2.7" }, NO_ADDRESS_KEY, 1],
    ["unix", "x-forwarded-for", { "x-forwarded-for": "192.0.2.7" }, "192.0.2.7", 0],
    ["unix", "x-forwarded-for", { "x-forwarded-for": "198.51.100.1, 192.0.2.7" }, "192.0.2.7", 0],
    [
      "unix, 10.0.0.0/8",
      "x-forwarded-for",
      { "x-forwarded-for": "192.0.2.7, 10.1.1.1" },
      "192.0.2.7",
      0,
    ],
    ["unix", "forwarded", { forwarded: 'for="[2001:db8::1]:4711"' }, "2001:0db8:0000:0000::/64", 0],
    ["unix", "x-forwarded-for", {}, NO_ADDRESS_KEY, 1],
    ["unix", "x-forwarded-for", { "x-forwarded-for": "not-an-address" }, NO_ADDRESS_KEY, 1],
  ];
  for (const [proxies, header, headers, expected, reports] of cases) {
    let told = 0;
    const options: CallerOptions = {
      trustedProxies: parseCidrSet(proxies).set,
      forwardedHeader: header as CallerOptions["forwardedHeader"],
      onNoAddress: () => told++,
    };
    const label = `${proxies} ${JSON.stringify(headers)}`;
    assert.equal(callerKey(new Headers(headers), UNIX_PEER, options), expected, label);
    assert.equal(createCallerKey(options)(new Headers(headers), UNIX_PEER), expected, label);
    assert.equal(told, 2 * reports, label);
  }
});

Deno.test("parseCidrSet() reads the entry unix as peers with no IP address", () => {
  assert.equal(parseCidrSet("10.0.0.0/8, UNIX").set.unix, true);
  assert.equal(parseCidrSet("10.0.0.0/8, UNIX").set.ranges.length, 1);
  assert.equal(parseCidrSet("10.0.0.0/8").set.unix, undefined);
  assert.deepEqual(parseCidrSet("unix:/run/x.sock").invalid, ["unix:/run/x.sock"]);
});

/** Serves the handler for `env` on a unix socket; returns a client for it and the warnings. */
function serveOnUnixSocket(env: Parameters<typeof testConfig>[0]) {
  const config = testConfig({ RATE_LIMIT: "2", ...env });
  const store = new MemoryStore({ limit: 2, windowMs: 60_000 }, { sweep: false });
  const warnings: string[] = [];
  const path = `${Deno.makeTempDirSync()}/discovery.sock`;
  const server = Deno.serve(
    { path, onListen() {} },
    createHandler({
      config,
      content: testContent(config),
      store,
      onNoAddress: () => warnings.push("no address"),
    }),
  );
  const client = Deno.createHttpClient({ proxy: { transport: "unix", path } });
  const get = async (forwardedFor: string) => {
    const response = await fetch("http://localhost/api/v1/platform", {
      client,
      headers: { "x-forwarded-for": forwardedFor },
    });
    await response.body?.cancel();
    return response.status;
  };
  return {
    get,
    warnings,
    async close() {
      client.close();
      await server.shutdown();
      store.close();
    },
  };
}

Deno.test("on a unix socket without TRUSTED_PROXIES=unix, callers share one budget and the handler says so once", async () => {
  const served = serveOnUnixSocket({});
  try {
    const statuses = [];
    for (const client of ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"]) {
      statuses.push(await served.get(client));
    }
    assert.deepEqual(statuses, [200, 200, 429, 429]);
    assert.deepEqual(served.warnings, ["no address"]);
  } finally {
    await served.close();
  }
});

Deno.test("on a unix socket with TRUSTED_PROXIES=unix, each forwarded client has its own budget and nothing is reported", async () => {
  const served = serveOnUnixSocket({ TRUSTED_PROXIES: "unix" });
  try {
    const statuses = [];
    for (const client of ["192.0.2.1", "192.0.2.2", "192.0.2.1", "192.0.2.2", "192.0.2.1"]) {
      statuses.push(await served.get(client));
    }
    assert.deepEqual(statuses, [200, 200, 200, 200, 429]);
    assert.deepEqual(served.warnings, []);
  } finally {
    await served.close();
  }
});

Deno.test("ipv4Value() answers each text right when texts repeat and alternate", () => {
  const text = fc.oneof(
    fc.constantFrom("192.0.2.1", "192.0.2.01", "10.0.0.1", "", "::1", "255.255.255.255"),
    fc.tuple(
      fc.integer({ min: 0, max: 300 }),
      fc.integer({ min: 0, max: 255 }),
      fc.integer({ min: 0, max: 255 }),
      fc.integer({ min: 0, max: 255 }),
    ).map((parts) => parts.join(".")),
  );
  const expected = (value: string): number | undefined => {
    const parts = value.split(".");
    if (parts.length !== 4 || !parts.every((p) => /^(0|[1-9]\d{0,2})$/.test(p))) return undefined;
    const numbers = parts.map(Number);
    if (numbers.some((n) => n > 255)) return undefined;
    return ((numbers[0]! << 24) | (numbers[1]! << 16) | (numbers[2]! << 8) | numbers[3]!) | 0;
  };
  fc.assert(
    fc.property(fc.array(text, { minLength: 1, maxLength: 20 }), (texts) => {
      for (const value of [...texts, ...texts.toReversed()]) {
        assert.equal(ipv4Value(value), expected(value), value);
        assert.equal(ipv4Value(value), expected(value), `${value}, again`);
      }
    }),
  );
});
