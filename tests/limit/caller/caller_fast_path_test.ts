/**
 * Tests of `createCallerKey`, the hot path's caller key: whatever the peer and the forwarded header,
 * it gives the key `callerKey` gives.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import {
  callerKey,
  type CallerOptions,
  createCallerKey,
} from "../../../lib/limit/caller/caller_key.ts";
import { parseCidrSet } from "../../../lib/http/address.ts";

function options(proxies: string, header: CallerOptions["forwardedHeader"] = "x-forwarded-for") {
  return { trustedProxies: parseCidrSet(proxies).set, forwardedHeader: header };
}
const info = (hostname: string) => ({ remoteAddr: { hostname } });

Deno.test("createCallerKey() takes one canonical IPv4 X-Forwarded-For entry from a trusted proxy as the key", () => {
  const keyOf = createCallerKey(options("10.0.0.0/8"));
  const headers = new Headers({ "x-forwarded-for": "192.0.2.7" });
  assert.equal(keyOf(headers, info("10.1.2.3")), "192.0.2.7");
  assert.equal(keyOf(headers, info("192.0.2.99")), "192.0.2.99", "untrusted peer: its own key");
});

Deno.test("createCallerKey() agrees with callerKey() on every peer and forwarded value", () => {
  const octet = fc.oneof(
    fc.integer({ min: 0, max: 255 }).map(String),
    fc.constantFrom("00", "01", "256", "1a", " 1", ""),
  );
  const ipv4 = fc.tuple(octet, octet, octet, octet).map((parts) => parts.join("."));
  const entry = fc.oneof(
    ipv4,
    fc.constantFrom("10.0.0.1", "2001:db8::1", "[2001:db8::1]:80", "192.0.2.1:8080", "unknown"),
  );
  const forwarded = fc.option(
    fc.array(entry, { minLength: 1, maxLength: 3 }).map((e) => e.join(", ")),
    { nil: undefined },
  );
  const peer = fc.constantFrom(
    "10.0.0.1",
    "127.0.0.1",
    "192.0.2.5",
    "::ffff:10.0.0.2",
    "2001:db8::5",
  );
  for (
    const o of [options("10.0.0.0/8, 127.0.0.1"), options(""), options("10.0.0.0/8", "forwarded")]
  ) {
    const keyOf = createCallerKey(o);
    fc.assert(
      fc.property(peer, forwarded, (hostname, value) => {
        const headers = new Headers();
        if (value !== undefined) {
          headers.set("x-forwarded-for", value);
          headers.set("forwarded", `for=${value}`);
        }
        assert.equal(keyOf(headers, info(hostname)), callerKey(headers, info(hostname), o));
      }),
      { numRuns: 300 },
    );
  }
});
