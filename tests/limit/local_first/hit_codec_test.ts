/**
 * Tests of the packing of local-first's hit batches: every key and time comes back, in order, and
 * the common callers cost the bytes lib/limit/README.md's formula counts.
 *
 * @module
 */

import assert from "node:assert/strict";
import fc from "npm:fast-check@4.10.2";
import { decodeHits, HitWriter, MAX_HIT_BYTES } from "../../../lib/limit/local_first/hit_codec.ts";

const T0 = 1_700_000_000_000;

function decoded(batch: Uint8Array): Array<[string, number]> {
  const hits: Array<[string, number]> = [];
  decodeHits(batch, (key, t) => hits.push([key, t]));
  return hits;
}

const ipv4 = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((b) => b.join("."));
const ipv6 = fc.array(fc.nat(0xffff), { minLength: 4, maxLength: 4 }).map((words) =>
  `${words.map((w) => w.toString(16).padStart(4, "0")).join(":")}::/64`
);
const other = fc.oneof(
  fc.constant("unix"),
  fc.string({ maxLength: 40 }),
  fc.string({ unit: "grapheme" }),
);

Deno.test("property: a batch gives back every hit packed, key and time (whole ms), in order", () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.tuple(fc.oneof(ipv4, ipv6, other), fc.integer({ min: -120_000, max: 120_000 })),
        { maxLength: 200 },
      ),
      (hits) => {
        const writer = new HitWriter(64 * 1024);
        const packed = hits.map(([key, offset]) => [key, T0 + offset + 0.4] as [string, number]);
        for (const [key, t] of packed) assert.ok(writer.append(key, t));
        assert.equal(writer.count, hits.length);
        assert.deepEqual(decoded(writer.take()), packed.map(([k, t]) => [k, Math.round(t)]));
        assert.equal(writer.count, 0);
      },
    ),
  );
});

Deno.test("an IPv4 hit takes 6 bytes and an IPv6 /64 hit 10 when a batch's hits are close in time", () => {
  const writer = new HitWriter(64 * 1024);
  for (let i = 0; i < 1000; i++) writer.append(`10.0.${i >> 8}.${i & 255}`, T0 + i);
  assert.equal(writer.take().length, 9 + 1000 * 6);
  for (let i = 0; i < 1000; i++) {
    writer.append(`2001:0db8:0000:${i.toString(16).padStart(4, "0")}::/64`, T0 + i * 10);
  }
  assert.equal(writer.take().length, 9 + 1000 * 10);
});

Deno.test("a writer refuses a hit that does not fit, packs nothing of it, and takes a batch of at most its size", () => {
  const writer = new HitWriter(9 + MAX_HIT_BYTES + 12);
  let packed = 0;
  while (writer.append("192.0.2.1", T0)) packed++;
  assert.ok(packed > 100);
  const batch = writer.take();
  assert.ok(batch.length <= 9 + MAX_HIT_BYTES + 12);
  assert.equal(decoded(batch).length, packed);
  assert.equal(writer.append("x".repeat(2000), T0), false, "a key longer than any caller's");
  assert.equal(writer.length, 0);
});

Deno.test("a batch of another format or cut short is refused whole", () => {
  const writer = new HitWriter(4096);
  writer.append("192.0.2.1", T0);
  writer.append("unix", T0);
  const batch = writer.take();
  assert.throws(() => decoded(batch.subarray(0, batch.length - 3)), RangeError);
  assert.throws(() => decoded(Uint8Array.of(2, ...batch.subarray(1))), RangeError);
  assert.deepEqual(decoded(new Uint8Array(0)), []);
});

Deno.test("decodeHits refuses what no writer packs: a key over MAX_KEY_BYTES, a time that is not a whole ms", () => {
  // A batch as another process could forge it: format 1, a first time, then one key of 2,000 bytes.
  const long = new Uint8Array(9 + 1 + 2 + 2000 + 1);
  long[0] = 1;
  new DataView(long.buffer).setFloat64(1, T0);
  long.set([3, 0xd0, 0x0f], 9); // kind 3, length 2000 as a varint
  long.fill(0x61, 12, 12 + 2000);
  assert.throws(() => decoded(long), /a key of 2000 bytes/);
  for (const first of [Number.NaN, Number.POSITIVE_INFINITY, 2 ** 60]) {
    const batch = Uint8Array.of(1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 192, 0, 2, 1, 0);
    new DataView(batch.buffer).setFloat64(1, first);
    assert.throws(() => decoded(batch), /a first time of/);
  }
});
