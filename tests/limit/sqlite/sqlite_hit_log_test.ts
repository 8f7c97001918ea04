/**
 * `SqliteHitLog` (`lib/limit/sqlite/sqlite_hit_log.ts`) held to the hit log contract on a real
 * SQLite file in a temporary folder, each log on its own connection, and, for the two-process case,
 * two real writer processes on the same file; then what is particular to it: rows it did not write
 * (unreadable, too large, a forged number), a replay read a chunk at a time, a log that stops
 * growing, and a write lock held by another process that fails an exchange within the busy timeout
 * instead of holding it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { DatabaseSync } from "node:sqlite";
import {
  EXCHANGE_ROWS,
  SQLITE_MAX_BATCH_BYTES,
  SqliteHitLog,
} from "../../../lib/limit/sqlite/sqlite_hit_log.ts";
import { idOf, testBatch, testHitLogContract } from "../_hit_log_contract.ts";

/** The margin the tests' logs state: short, so that the expiry case waits little. */
const MARGIN_MS = 250;
const WRITER = fileURLToPath(new URL("./_sqlite_hit_log_writer.ts", import.meta.url));

function openLogs(path: string, instances: readonly string[], windowMs: number): SqliteHitLog[] {
  return instances.map((instance) =>
    SqliteHitLog.open(path, windowMs, { instance, marginMs: MARGIN_MS })
  );
}

testHitLogContract({
  name: "SqliteHitLog",
  // Rows are filtered by their time at the replay: no lag past the margin.
  replayMarginMs: MARGIN_MS,
  async newStore() {
    const dir = await Deno.makeTempDir({ prefix: "sqlite_hit_log_" });
    const path = `${dir}/hits.sqlite3`;
    return {
      open: (instances, windowMs) => Promise.resolve(openLogs(path, instances, windowMs)),
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

async function withFile(body: (path: string, raw: DatabaseSync) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "sqlite_hit_log_" });
  const path = `${dir}/hits.sqlite3`;
  // Creates the table, as the first service would.
  SqliteHitLog.open(path, 60_000, { instance: "creator" }).close();
  const raw = new DatabaseSync(path);
  try {
    await body(path, raw);
  } finally {
    raw.close();
    await Deno.remove(dir, { recursive: true });
  }
}

const names = (batches: readonly { instance: string; seq: number }[]) =>
  batches.map((b) => `${b.instance}#${b.seq}`);

Deno.test("SqliteHitLog skips a row it cannot read or too large, counts it, and reads on", () =>
  withFile(async (path, raw) => {
    const [a, b] = openLogs(path, ["a", "b"], 60_000);
    try {
      await b!.exchange(null);
      const insert = raw.prepare(
        "INSERT INTO hit_log (instance, seq, at, hits) VALUES (?, ?, ?, ?)",
      );
      insert.run("x", 0, Date.now(), "text, not bytes");
      insert.run("y", "zero", Date.now(), Uint8Array.of(1));
      insert.run("z", 0, Date.now(), new Uint8Array(SQLITE_MAX_BATCH_BYTES + 1));
      await a!.exchange(testBatch("a", 0));
      assert.deepEqual(names(await b!.exchange(null)), ["a#0"]);
      assert.equal(b!.health.unreadable, 3);
      await a!.exchange(testBatch("a", 1));
      assert.deepEqual(names(await b!.exchange(null)), ["a#1"], "read on past them");
      assert.equal(b!.health.unreadable, 3, "each counted once");
    } finally {
      a!.close();
      b!.close();
    }
  }));

Deno.test("SqliteHitLog: a row set under a writer's next number costs that batch, and it says so", () =>
  withFile(async (path, raw) => {
    const [a, b] = openLogs(path, ["a", "b"], 60_000);
    try {
      await a!.exchange(testBatch("a", 0));
      raw.prepare("INSERT INTO hit_log (instance, seq, at, hits) VALUES (?, ?, ?, ?)")
        .run("a", 1, Date.now(), Uint8Array.of(9));
      await a!.exchange(testBatch("a", 1));
      assert.equal(a!.health.tampered, 1);
      assert.match(a!.health.tamperedReason, /refused the first time/);
      // The same batch sent again (an exchange that failed after its commit) is kept once, untold.
      await a!.exchange(testBatch("a", 2));
      await a!.exchange(testBatch("a", 2));
      assert.equal(a!.health.tampered, 1);
      assert.deepEqual(names(await b!.exchange(null)), ["a#0", "a#1", "a#2"]);
    } finally {
      a!.close();
      b!.close();
    }
  }));

Deno.test("SqliteHitLog reads a replay a chunk at a time", () =>
  withFile(async (path) => {
    const [a] = openLogs(path, ["a"], 60_000);
    const count = 2 * EXCHANGE_ROWS + 5;
    for (let seq = 0; seq < count; seq++) await a!.exchange(testBatch("a", seq));
    const [b] = openLogs(path, ["b"], 60_000);
    try {
      const chunks: number[] = [];
      do chunks.push((await b!.exchange(null)).length); while (b!.more);
      assert.deepEqual(chunks, [EXCHANGE_ROWS, EXCHANGE_ROWS, 5]);
      assert.equal(b!.health.tampered + b!.health.unreadable, 0);
    } finally {
      a!.close();
      b!.close();
    }
  }));

Deno.test("SqliteHitLog's rows leave the file a window and the margin after, and stay out of a replay", () =>
  withFile(async (path, raw) => {
    const windowMs = 300;
    const [a, b] = openLogs(path, ["a", "b"], windowMs);
    for (let seq = 0; seq < 5; seq++) await a!.exchange(testBatch("a", seq, 4096));
    await b!.exchange(testBatch("b", 0, 4096));
    await new Promise((resolve) => setTimeout(resolve, windowMs + MARGIN_MS + 1_100));
    // The next append trims (at most once a second): only it is left.
    await a!.exchange(testBatch("a", 5));
    const left = raw.prepare("SELECT instance, seq FROM hit_log ORDER BY id").all();
    assert.deepEqual(names(left as unknown as { instance: string; seq: number }[]), ["a#5"]);
    // A reader that replays skips an old row that no trim has removed yet (another writer's).
    raw.prepare("INSERT INTO hit_log (instance, seq, at, hits) VALUES (?, ?, ?, ?)")
      .run("old", 0, Date.now() - 10 * windowMs, Uint8Array.of(1));
    const [c] = openLogs(path, ["c"], windowMs);
    assert.deepEqual(names(await c!.exchange(null)), ["a#5"]);
    // And after the replay, nothing before it comes back.
    assert.deepEqual(names(await c!.exchange(null)), []);
    for (const log of [a, b, c]) log!.close();
  }));

Deno.test("SqliteHitLog alone trims its own rows: one instance's file stops growing", () =>
  withFile(async (path, raw) => {
    const windowMs = 200;
    const [a] = openLogs(path, ["a"], windowMs);
    for (let seq = 0; seq < 5; seq++) await a!.exchange(testBatch("a", seq));
    await new Promise((resolve) => setTimeout(resolve, windowMs + MARGIN_MS + 1_100));
    await a!.exchange(testBatch("a", 5));
    const left = raw.prepare("SELECT seq FROM hit_log ORDER BY id").all();
    assert.deepEqual(left.map((row) => row.seq), [5]);
    a!.close();
  }));

Deno.test("SqliteHitLog fails an exchange within its busy timeout while another holds the lock, and keeps its cursor", () =>
  withFile(async (path, raw) => {
    const [a, b] = openLogs(path, ["a", "b"], 60_000);
    try {
      await a!.exchange(testBatch("a", 0));
      raw.exec("BEGIN IMMEDIATE");
      const started = performance.now();
      await assert.rejects(b!.exchange(testBatch("b", 0)), /locked|busy/i);
      const waited = performance.now() - started;
      assert.ok(waited >= 90 && waited < 1_000, `waited ${waited.toFixed(0)} ms`);
      raw.exec("ROLLBACK");
      // Sent again, the batch lands once, and a's batch not read is read now.
      assert.deepEqual(names(await b!.exchange(testBatch("b", 0))), ["a#0"]);
      assert.deepEqual((await a!.exchange(null)).map(idOf), ["b#0"]);
      assert.equal(b!.health.tampered, 0);
    } finally {
      a!.close();
      b!.close();
    }
  }));

Deno.test("SqliteHitLog keeps its cursor when the commit fails after the read", () =>
  withFile(async (path) => {
    const [a] = openLogs(path, ["a"], 60_000);
    const db = new DatabaseSync(path);
    const b = new SqliteHitLog(db, 60_000, { instance: "b" });
    try {
      await a!.exchange(testBatch("a", 0));
      await b.exchange(null);
      await a!.exchange(testBatch("a", 1));
      // The next COMMIT fails: a deferred foreign-key check that cannot hold.
      db.exec("PRAGMA foreign_keys = ON");
      db.exec("CREATE TABLE parent (id INTEGER PRIMARY KEY)");
      db.exec(
        "CREATE TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
      );
      db.exec(
        "CREATE TRIGGER orphan AFTER INSERT ON hit_log WHEN NEW.instance = 'b' BEGIN INSERT INTO child VALUES (42); END",
      );
      await assert.rejects(b.exchange(testBatch("b", 0)), /constraint/i);
      db.exec("DROP TRIGGER orphan");
      // What that exchange read comes again, once; its batch is sent again and kept once.
      assert.deepEqual(names(await b.exchange(testBatch("b", 0))), ["a#1"]);
      assert.deepEqual(names(await a!.exchange(null)), ["b#0"]);
      assert.equal(b.health.tampered, 0);
    } finally {
      a!.close();
      b.close();
    }
  }));

Deno.test("SqliteHitLog refuses, before writing anything, a batch too big, of another instance or misnumbered", () =>
  withFile(async (path) => {
    const [a, b] = openLogs(path, ["a", "b"], 60_000);
    const bad = [
      testBatch("a", 0, a!.maxBatchBytes + 1),
      testBatch("b", 0),
      { ...testBatch("a", 0), seq: -1 },
      { ...testBatch("a", 0), seq: 0.5 },
    ];
    for (const batch of bad) await assert.rejects(a!.exchange(batch), RangeError);
    assert.equal(a!.roundTrips, 0);
    assert.deepEqual(await b!.exchange(null), []);
    assert.throws(() => SqliteHitLog.open(path, 1000, { instance: "" }), RangeError);
    assert.throws(() => SqliteHitLog.open(path, 1000, { instance: "x".repeat(257) }), RangeError);
    a!.close();
    b!.close();
  }));
