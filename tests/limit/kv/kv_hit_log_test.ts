/**
 * `KvHitLog` (`lib/limit/kv/kv_hit_log.ts`) held to the hit log contract on a real SQLite file in a
 * temporary folder, each log on its own connection, and, for the two-process case, two real writer
 * processes on the same file; then what is particular to KV: the round trips of an exchange, the
 * batches it refuses, and a database that stops growing.
 *
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { KvHitLog } from "../../../lib/limit/kv/kv_hit_log.ts";
import { isIntact, testBatch, testHitLogContract } from "../_hit_log_contract.ts";

/** The margin the tests' logs state: short, so that the expiry case waits little. */
const MARGIN_MS = 250;
/** SQLite deletes expired entries when a connection opens the file, up to a second after jitter. */
const OPEN_COLLECT_MS = 1_000;
const WRITER = fileURLToPath(new URL("./_kv_hit_log_writer.ts", import.meta.url));

async function openLogs(path: string, instances: readonly string[], windowMs: number) {
  return await Promise.all(
    instances.map(async (instance) =>
      new KvHitLog(await Deno.openKv(path), windowMs, {
        instance,
        ownsKv: true,
        marginMs: MARGIN_MS,
      })
    ),
  );
}

testHitLogContract({
  name: "KvHitLog",
  replayMarginMs: MARGIN_MS + OPEN_COLLECT_MS,
  async newStore() {
    const dir = await Deno.makeTempDir({ prefix: "kv_hit_log_" });
    const path = `${dir}/log.sqlite3`;
    return {
      open: (instances, windowMs) => openLogs(path, instances, windowMs),
      writerCommand: (args) =>
        new Deno.Command(Deno.execPath(), {
          args: ["run", "--allow-read", "--allow-write", WRITER, path, JSON.stringify(args)],
          stdout: "piped",
          stderr: "piped",
        }),
      close: () => Deno.remove(dir, { recursive: true }),
    };
  },
});

async function withFile(body: (path: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "kv_hit_log_" });
  try {
    await body(`${dir}/log.sqlite3`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("KvHitLog exchange costs a commit, a registry list and one getMany per ten new batches", () =>
  withFile(async (path) => {
    const logs = await openLogs(path, ["a", "b", "c", "d"], 60_000);
    const [a, b, c, d] = logs;
    for (const [i, log] of logs.entries()) {
      await log.exchange(testBatch(["a", "b", "c", "d"][i]!, 0));
    }
    await a!.exchange(null);
    // Steady state: each other writer appended one batch since a's last exchange.
    await b!.exchange(testBatch("b", 1));
    await c!.exchange(testBatch("c", 1));
    await d!.exchange(testBatch("d", 1));
    let before = a!.roundTrips;
    assert.deepEqual((await a!.exchange(testBatch("a", 1))).map((x) => `${x.instance}#${x.seq}`), [
      "b#1",
      "c#1",
      "d#1",
    ]);
    assert.equal(a!.roundTrips - before, 3, "commit + registry list + one getMany");
    before = a!.roundTrips;
    assert.deepEqual(await a!.exchange(testBatch("a", 2)), []);
    assert.equal(a!.roundTrips - before, 2, "nothing new: commit + registry list");
    before = a!.roundTrips;
    assert.deepEqual(await a!.exchange(null), []);
    assert.equal(a!.roundTrips - before, 1, "nothing to append, nothing new: the registry list");
    for (const log of logs) log.close();
  }));

Deno.test("KvHitLog reads a writer far behind by range and several by getMany, once, in order", () =>
  withFile(async (path) => {
    const [a, b, c, r] = await openLogs(path, ["a", "b", "c", "r"], 60_000);
    await r!.exchange(null);
    // Interleaved appends: a 25 ahead (a range list), b and c 8 each (16 keys: two getMany calls).
    const expected: string[] = [];
    for (let seq = 0; seq < 25; seq++) {
      for (const [name, log] of [["a", a], ["b", b], ["c", c]] as const) {
        if (name !== "a" && seq >= 8) continue;
        await log!.exchange(testBatch(name, seq));
        expected.push(`${name}#${seq}`);
      }
    }
    const before = r!.roundTrips;
    const got = await r!.exchange(null);
    assert.deepEqual(got.map((x) => `${x.instance}#${x.seq}`), expected, "commit order, once");
    assert.ok(got.every(isIntact));
    assert.equal(r!.roundTrips - before, 1 + 1 + 2, "registry, a's range, two getMany");
    assert.deepEqual(await r!.exchange(null), []);
    for (const log of [a, b, c, r]) log!.close();
  }));

Deno.test("KvHitLog refuses, before sending anything, a batch too big, of another instance or misnumbered", () =>
  withFile(async (path) => {
    const [a, b] = await openLogs(path, ["a", "b"], 60_000);
    const bad = [
      testBatch("a", 0, a!.maxBatchBytes + 1),
      testBatch("b", 0),
      { ...testBatch("a", 0), seq: -1 },
      { ...testBatch("a", 0), seq: 0.5 },
    ];
    for (const batch of bad) await assert.rejects(a!.exchange(batch), RangeError);
    assert.equal(a!.roundTrips, 0);
    assert.deepEqual(await b!.exchange(null), []);
    assert.ok(a!.maxBatchBytes <= 65_536 - 4096, "room under KV's 64 KiB value limit");
    assert.throws(() => new KvHitLog(b as unknown as Deno.Kv, 1000, { instance: "" }), RangeError);
    assert.throws(
      () => new KvHitLog(b as unknown as Deno.Kv, 1000, { instance: "x".repeat(257) }),
      RangeError,
    );
    a!.close();
    b!.close();
  }));

Deno.test("KvHitLog keeps its cursors when an exchange fails, and takes one exchange at a time", () =>
  withFile(async (path) => {
    const kv = await Deno.openKv(path);
    let failReads = 0;
    const flaky = new Proxy(kv, {
      get(target, property) {
        if (property === "getMany" && failReads > 0) {
          failReads--;
          return () => Promise.reject(new Error("injected read failure"));
        }
        const value = Reflect.get(target, property);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const reader = new KvHitLog(flaky, 60_000, { instance: "r", ownsKv: true });
    const [a] = await openLogs(path, ["a"], 60_000);
    await a!.exchange(testBatch("a", 0));
    assert.deepEqual((await reader.exchange(testBatch("r", 0))).map((x) => x.seq), [0]);
    await a!.exchange(testBatch("a", 1));
    failReads = 1;
    await assert.rejects(reader.exchange(testBatch("r", 1)), /injected/);
    // The batch that failed is sent again with its number; the one not read is read now, once.
    assert.deepEqual(
      (await reader.exchange(testBatch("r", 1))).map((x) => `${x.instance}#${x.seq}`),
      [
        "a#1",
      ],
    );
    // a read r#0 when it appended a#1; r#1, committed by the exchange that failed, comes once.
    assert.deepEqual((await a!.exchange(null)).map((x) => `${x.instance}#${x.seq}`), ["r#1"]);
    const first = reader.exchange(null);
    await assert.rejects(reader.exchange(null), /one exchange at a time/);
    await first;
    reader.close();
    a!.close();
  }));

Deno.test("KvHitLog's batches and registry leave the database a window and the margin after", () =>
  withFile(async (path) => {
    const windowMs = 300;
    const [a, b] = await openLogs(path, ["a", "b"], windowMs);
    for (let seq = 0; seq < 5; seq++) await a!.exchange(testBatch("a", seq, 4096));
    await b!.exchange(testBatch("b", 0, 4096));
    await new Promise((resolve) => setTimeout(resolve, windowMs + MARGIN_MS + 100));
    // A connection that opens the file deletes what expired.
    const kv = await Deno.openKv(path);
    assert.deepEqual(await Array.fromAsync(kv.list({ prefix: [] })), []);
    kv.close();
    a!.close();
    b!.close();
  }));
