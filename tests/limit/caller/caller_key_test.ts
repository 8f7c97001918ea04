/**
 * Tests of caller keys: IPv4-mapped and NAT64 peers, /64 grouping, trusted proxies and the forwarded
 * walk, peers with no IP address (unix sockets), also through a real unix-socket server, and the
 * words a key is held under (`parseCallerKey`).
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import { createHandler } from "../../../lib/handler.ts";
import {
  callerKey,
  type CallerOptions,
  createCallerKey,
  ipv4Value,
  NO_ADDRESS_KEY,
  parseCallerKey,
} from "../../../lib/limit/caller/caller_key.ts";
import { parseCidrSet } from "../../../lib/http/address.ts";
import { truncatedAddress } from "../../../lib/access_log.ts";
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

Deno.test("parseCallerKey() holds canonical IPv4 addresses and IPv6 /64 keys as words, any other key by its string", () => {
  assert.deepEqual(parseCallerKey("0.0.0.0"), { kind: 1, hi: 0, lo: 0 });
  assert.deepEqual(parseCallerKey("255.255.255.255"), { kind: 1, hi: 0, lo: -1 });
  assert.deepEqual(parseCallerKey("ffff:ffff:0000:0001::/64"), { kind: 2, hi: -1, lo: 1 });
  for (
    const other of [
      "010.0.0.1", // leading zero: not canonical, so not the same caller as 10.0.0.1
      "10.0.0.01",
      "256.0.0.1",
      "1.2.3",
      "2001:db8:1:2::/64", // short hextets: not canonical
      "2001:0DB8:0001:0002::/64", // upper case: not canonical
      "2001:0db8:0001:0002::/48",
      "2001:0db8:0001:0002:/64x",
      "2001:0db8:0001:000g::/64",
      "2001:0db8-0001:0002::/64",
      "unix",
      "",
    ]
  ) {
    assert.equal(parseCallerKey(other).kind, 3, other);
  }
});

Deno.test("property: parseCallerKey() gives words exactly for a canonical key, and back to the same text", () => {
  const ipv4 = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;
  const ipv6 = /^(?:[0-9a-f]{4}:){4}:\/64$/;
  const octet = fc.oneof(
    fc.integer({ min: 0, max: 255 }).map(String),
    fc.integer({ min: 0, max: 99 }).map((o) => `0${o}`), // leading zero
    fc.integer({ min: 256, max: 999 }).map(String), // out of range
    fc.constantFrom("", "1234", " 1", "1a", "-1"),
  );
  const dotted = fc.array(octet, { minLength: 2, maxLength: 5 }).map((o) => o.join("."));
  const hextet = fc.oneof(
    fc.integer({ min: 0, max: 0xffff }).map((v) => v.toString(16).padStart(4, "0")),
    fc.integer({ min: 0, max: 0xfff }).map((v) => v.toString(16)), // short
    fc.integer({ min: 0xa, max: 0xffff }).map((v) => v.toString(16).padStart(4, "0").toUpperCase()),
    fc.constantFrom("", "0g00", "12345", ":"),
  );
  const network = fc.tuple(
    fc.array(hextet, { minLength: 3, maxLength: 5 }),
    fc.constantFrom("::/64", "::/48", ":/64"),
  )
    .map(([h, tail]) => h.join(":") + tail);
  fc.assert(
    fc.property(fc.oneof(dotted, network, fc.string()), (text) => {
      const { kind, hi, lo } = parseCallerKey(text);
      const expected = ipv4.test(text) ? 1 : ipv6.test(text) ? 2 : 3;
      assert.equal(kind, expected, text);
      // Back from the words to the very same string: no two keys share words.
      if (kind === 1) {
        assert.equal([lo >>> 24, (lo >>> 16) & 255, (lo >>> 8) & 255, lo & 255].join("."), text);
      }
      if (kind === 2) {
        const hex = (v: number) => v.toString(16).padStart(4, "0");
        const words = [hi >>> 16, hi & 0xffff, lo >>> 16, lo & 0xffff];
        assert.equal(`${words.map(hex).join(":")}::/64`, text);
      }
    }),
    { numRuns: 5000 },
  );
});
