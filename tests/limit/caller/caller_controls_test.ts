/**
 * The operator controls' matching on caller keys (lib/limit/caller/caller_controls.ts), held against
 * the plain CIDR test of lib/http/address.ts on every key shape, and the lists' start-up checks.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import {
  CALLER_DENIED,
  CALLER_EXEMPT,
  CALLER_LIMITED,
  controlListProblems,
  createCallerVerdict,
} from "../../../lib/limit/caller/caller_controls.ts";
import { keyOfIp } from "../../../lib/limit/caller/caller_key.ts";
import {
  cidrSetHas,
  cidrSetsOverlap,
  parseCidrSet,
  parseIp,
  rangeText,
} from "../../../lib/http/address.ts";

const set = (list: string) => parseCidrSet(list).set;

Deno.test("the verdict on a key is the CIDR test on its address, deny before exempt, over IPv4 and IPv6 /64 keys", () => {
  const exempt = set("0.0.0.0/1, 192.0.2.0/24, 10.0.0.0/8, 2001:db8::/32, 2001:db8:1:2::/64, ::/0");
  const deny = set("10.9.8.7, 192.0.2.128/25, 2001:db8:ff00::/40");
  const verdict = createCallerVerdict(exempt, deny)!;
  const cases: Array<[string, number]> = [
    ["192.0.2.1", CALLER_EXEMPT],
    ["192.0.2.200", CALLER_DENIED],
    ["10.9.8.7", CALLER_DENIED],
    ["10.9.8.8", CALLER_EXEMPT],
    ["127.0.0.1", CALLER_EXEMPT], // 0.0.0.0/1
    ["198.51.100.1", CALLER_LIMITED],
    ["2001:0db8:0001:0002::/64", CALLER_EXEMPT],
    ["2001:0db8:ff12:0000::/64", CALLER_DENIED],
    ["2002:0000:0000:0000::/64", CALLER_EXEMPT], // ::/0
    ["unix", CALLER_LIMITED],
    ["", CALLER_LIMITED],
  ];
  for (const [key, expected] of cases) {
    assert.equal(verdict(key), expected, key);
    assert.equal(verdict(key), expected, `${key}, remembered`);
  }
  assert.equal(createCallerVerdict(set(""), set("")), undefined);
});

Deno.test("property: the verdict equals cidrSetHas on the key's address for random ranges and addresses", () => {
  const v4 = fc.tuple(
    fc.integer({ min: 0, max: 255 }),
    fc.integer({ min: 0, max: 255 }),
    fc.integer({ min: 0, max: 255 }),
    fc.integer({ min: 0, max: 255 }),
  )
    .map((bytes) => bytes.join("."));
  const v6 = fc.array(fc.integer({ min: 0, max: 0xffff }), { minLength: 8, maxLength: 8 })
    .map((words) => words.map((w) => w.toString(16)).join(":"));
  const range = fc.oneof(
    fc.tuple(v4, fc.integer({ min: 0, max: 32 })).map(([a, p]) => `${a}/${p}`),
    fc.tuple(v6, fc.integer({ min: 0, max: 64 })).map(([a, p]) => `${a}/${p}`),
  );
  fc.assert(
    fc.property(
      fc.array(range, { maxLength: 6 }),
      fc.array(range, { maxLength: 6 }),
      fc.array(fc.oneof(v4, v6), { minLength: 1, maxLength: 20 }),
      (exempt, deny, addresses) => {
        const exemptSet = set(exempt.join(","));
        const denySet = set(deny.join(","));
        const verdict = createCallerVerdict(exemptSet, denySet) ?? (() => CALLER_LIMITED);
        for (const address of addresses) {
          const key = keyOfIp(parseIp(address)!);
          // The key's address: an IPv6 key stands for its /64 (the rest zero), as the ranges are /64 at most.
          const bytes = parseIp(key.replace("/64", ""))!;
          const expected = cidrSetHas(denySet, bytes)
            ? CALLER_DENIED
            : cidrSetHas(exemptSet, bytes)
            ? CALLER_EXEMPT
            : CALLER_LIMITED;
          assert.equal(verdict(key), expected, `${key} in ${exempt} / ${deny}`);
        }
      },
    ),
  );
});

Deno.test("cidrSetsOverlap() finds ranges sharing an address, whichever is wider; rangeText() spells them", () => {
  assert.deepEqual(cidrSetsOverlap(set("10.0.0.0/8"), set("10.1.2.3")), [
    "10.0.0.0/8",
    "10.1.2.3/32",
  ]);
  assert.deepEqual(cidrSetsOverlap(set("10.1.2.3"), set("10.0.0.0/8")), [
    "10.1.2.3/32",
    "10.0.0.0/8",
  ]);
  assert.equal(cidrSetsOverlap(set("10.0.0.0/9"), set("10.128.0.0/9")), undefined);
  assert.equal(cidrSetsOverlap(set("::/0"), set("10.0.0.0/8")), undefined, "families apart");
  assert.deepEqual(cidrSetsOverlap(set("::/64"), set("::1")), ["::/64", "::1/128"]);
  assert.deepEqual(cidrSetsOverlap(set("::ffff:10.0.0.0/104"), set("10.2.3.4")), [
    "10.0.0.0/8",
    "10.2.3.4/32",
  ]);
  assert.equal(
    rangeText(parseCidrSet("2001:db8:0:0:1::/80").set.ranges[0]!),
    "2001:db8:0:0:1::/80",
  );
});

Deno.test("controlListProblems() refuses unix, IPv6 entries narrower than /64, ranges of TRUSTED_PROXIES and over-long lists", () => {
  const proxies = set("127.0.0.1, ::1");
  assert.deepEqual(
    controlListProblems("RATE_LIMIT_EXEMPT", set("192.0.2.0/24, 2001:db8::/64"), proxies),
    [],
  );
  assert.equal(controlListProblems("RATE_LIMIT_EXEMPT", set("unix"), proxies).length, 1);
  assert.match(
    controlListProblems("RATE_LIMIT_DENY", set("2001:db8:1:2:3::/65"), proxies)[0]!,
    /write 2001:db8:1:2::\/64/,
  );
  assert.match(
    controlListProblems("RATE_LIMIT_DENY", set("::/0"), proxies)[0]!,
    /TRUSTED_PROXIES' ::1\/128/,
  );
  const many = Array.from({ length: 4097 }, (_, i) => `10.${i >> 8}.${i & 255}.0/24`).join(",");
  assert.match(controlListProblems("RATE_LIMIT_EXEMPT", set(many), set(""))[0]!, /at most 4096/);
});
