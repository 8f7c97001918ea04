/**
 * The new callers' budget per /48 (`lib/workers/new_caller_gate.ts`) in process, over a stand-in
 * for the Rate Limiting binding that counts its calls: which keys it budgets, one call for a
 * caller's first requests in flight at once, and a failing binding said once and let through. What
 * the object does past the budget (the caller decided exactly, kept in memory until it comes back)
 * is `CallerLogs`' (`tests/limit/durable_object/object_logs_test.ts`); on real workerd, with the
 * binding and the object as shipped: `new_callers_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { parseIp, unmapIpv4 } from "../../lib/http/address.ts";
import { keyOfIp, NO_ADDRESS_KEY } from "../../lib/limit/caller/caller_key.ts";
import {
  networkOf,
  NEW_CALLERS_BINDING,
  newCallerGate,
} from "../../lib/workers/new_caller_gate.ts";

/** The caller key of `address`, as the handler makes it (IPv4-mapped counts as IPv4). */
const keyOf = (address: string) => keyOfIp(unmapIpv4(parseIp(address)!));

/** A stand-in binding: `success` while fewer than `budget` calls were made; counts its calls. */
function binding(budget: number) {
  const keys: string[] = [];
  return {
    keys,
    limit({ key }: { key: string }) {
      keys.push(key);
      return Promise.resolve({ success: keys.length <= budget });
    },
  };
}

Deno.test("networkOf() gives an IPv6 caller key's /48, and nothing for IPv4, the no-address key or a shard", () => {
  assert.equal(networkOf(keyOf("2001:db8:1:2::3")), "2001:0db8:0001::/48");
  assert.equal(networkOf(keyOf("2001:db8:1:ffff::9")), "2001:0db8:0001::/48");
  assert.notEqual(networkOf(keyOf("2001:db8:2:1::1")), networkOf(keyOf("2001:db8:1:1::1")));
  assert.equal(networkOf(keyOf("::ffff:192.0.2.1")), undefined); // counts as its IPv4 address
  assert.equal(networkOf(keyOf("192.0.2.1")), undefined);
  assert.equal(networkOf(NO_ADDRESS_KEY), undefined);
  assert.equal(networkOf("shard:7"), undefined);
});

Deno.test("newCallerGate() budgets IPv6 callers by /48 and lets others through without a call", async () => {
  const limiter = binding(2);
  const gate = newCallerGate({ [NEW_CALLERS_BINDING]: limiter })!;
  assert.equal(gate.admit(keyOf("192.0.2.1")), true);
  assert.equal(gate.admit(NO_ADDRESS_KEY), true);
  assert.deepEqual(limiter.keys, []);
  const admitted = [];
  for (let i = 1; i <= 4; i++) admitted.push(await gate.admit(keyOf(`2001:db8:1:${i}::1`)));
  assert.deepEqual(admitted, [true, true, false, false]);
  assert.deepEqual(new Set(limiter.keys), new Set(["2001:0db8:0001::/48"]));
  assert.equal(newCallerGate({ [NEW_CALLERS_BINDING]: "not a binding" }), undefined);
  assert.equal(newCallerGate(undefined), undefined);
});

Deno.test("newCallerGate(): a caller's first requests in flight at once share one call of the binding", async () => {
  const limiter = binding(1);
  const gate = newCallerGate({ [NEW_CALLERS_BINDING]: limiter })!;
  const key = keyOf("2001:db8:7:1::1");
  const burst = await Promise.all(Array.from({ length: 8 }, () => gate.admit(key)));
  assert.deepEqual(burst, Array(8).fill(true));
  assert.equal(limiter.keys.length, 1);
  // Settled, the next asks again (the object holds an admitted caller and never asks for it).
  assert.equal(await gate.admit(key), false);
  assert.equal(limiter.keys.length, 2);
});

Deno.test("newCallerGate(): a binding that fails lets new callers through, said once", async () => {
  const said: string[] = [];
  const failing = { limit: () => Promise.reject(new Error("binding down")) };
  const gate = newCallerGate({ [NEW_CALLERS_BINDING]: failing }, (line) => said.push(line))!;
  assert.equal(await gate.admit(keyOf("2001:db8:8:1::1")), true);
  assert.equal(await gate.admit(keyOf("2001:db8:8:2::1")), true);
  assert.equal(said.length, 1);
  assert.match(said[0]!, /NEW_CALLERS rate-limiting binding failed.*binding down/);
});
