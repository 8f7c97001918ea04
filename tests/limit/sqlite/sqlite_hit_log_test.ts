/**
 * `SqliteHitLog` (`lib/limit/sqlite/sqlite_hit_log.ts`) held to the hit log contract on a real
 * SQLite file in a temporary folder, each log on its own connection, and, for the two-process case,
 * two real writer processes on the same file; then what is particular to it: rows it did not write
 * (unreadable, too large, a forged number), a replay read a chunk at a time, a log that stops
 * growing, and a write lock held by another process that fails an exchange within the busy timeout
 * instead of holding it.
 *
 * It needs no Deno API but `Deno.test`, so it runs on Node too, over Node's own SQLite
 * (`node --test-force-exit tests/node/_deno_test_on_node.ts tests/limit/sqlite/sqlite_hit_log_test.ts`);
 * there the contract's two-process case, which spawns Deno, is skipped.
 *
 * @module
 */

import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
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

/** A temporary folder of its own, by node:fs (the file runs on Node too). */
function tempDir(): string {
  return mkdtempSync(join(tmpdir(), "sqlite_hit_log_"));
}

/** Whether this runtime can spawn the contract's writer processes (Deno; not Node's shim). */
const canSpawn = typeof Deno.Command === "function";

testHitLogContract({
  name: "SqliteHitLog",
  // Rows are filtered by their time at the replay: no lag past the margin.
  replayMarginMs: MARGIN_MS,
  newStore() {
    const dir = tempDir();
    const path = join(dir, "hits.sqlite3");
    return Promise.resolve({
      open: (instances, windowMs) => Promise.resolve(openLogs(path, instances, windowMs)),
      ...(canSpawn
        ? {
          writerCommand: (args) =>
            new Deno.Command(Deno.execPath(), {
              args: ["run", "--allow-read", "--allow-write", WRITER, path, JSON.stringify(args)],
              stdout: "piped",
              stderr: "piped",
            }),
        }
        : {}),
      close: () => Promise.resolve(rmSync(dir, { recursive: true, force: true })),
    });
  },
});

async function withFile(body: (path: string, raw: DatabaseSync) => Promise<void>): Promise<void> {
  const dir = tempDir();
  const path = join(dir, "hits.sqlite3");
  // Creates the table, as the first service would.
  SqliteHitLog.open(path, 60_000, { instance: "creator" }).close();
  const raw = new DatabaseSync(path);
  try {
    await body(path, raw);
  } finally {
    raw.close();
    rmSync(dir, { recursive: true, force: true });
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

/** A wall clock and a monotonic clock the test moves, together or apart. */
function clocks(wallOffsetMs = 0) {
  const time = { mono: 1_000, wall: Date.now() + wallOffsetMs };
  return {
    time,
    options: { now: () => time.wall, monotonicNow: () => time.mono },
    advance(ms: number) {
      time.mono += ms;
      time.wall += ms;
    },
  };
}

Deno.test("SqliteHitLog's rows leave the file a window and the margin (and the trim's second) after, and stay out of a replay", () =>
  withFile(async (path, raw) => {
    const windowMs = 300;
    const c = clocks();
    const open = (instance: string) =>
      SqliteHitLog.open(path, windowMs, { instance, marginMs: MARGIN_MS, ...c.options });
    const [a, b] = [open("a"), open("b")];
    for (let seq = 0; seq < 5; seq++) await a.exchange(testBatch("a", seq, 4096));
    await b.exchange(testBatch("b", 0, 4096));
    c.advance(windowMs + MARGIN_MS + 1_000);
    await a.exchange(testBatch("a", 5));
    c.advance(1_000);
    // Trimmed at most once a second, up to a's cursor a window and the margin ago: at a#5's
    // exchange a#0 only (the rest came after a's mark), at a#6's every row a second old.
    await a.exchange(testBatch("a", 6));
    const left = raw.prepare("SELECT instance, seq FROM hit_log ORDER BY id").all();
    assert.deepEqual(names(left as unknown as { instance: string; seq: number }[]), ["a#6"]);
    // A reader that replays skips an old row that no trim has removed yet (another writer's).
    raw.prepare("INSERT INTO hit_log (instance, seq, at, hits) VALUES (?, ?, ?, ?)")
      .run("old", 0, c.time.wall - 10 * windowMs, Uint8Array.of(1));
    const d = open("d");
    assert.deepEqual(names(await d.exchange(null)), ["a#6"]);
    // And after the replay, nothing before it comes back.
    assert.deepEqual(names(await d.exchange(null)), []);
    for (const log of [a, b, d]) log.close();
  }));

Deno.test("SqliteHitLog alone trims its own rows: one instance's file stops growing", () =>
  withFile(async (path, raw) => {
    const windowMs = 200;
    const c = clocks();
    const a = SqliteHitLog.open(path, windowMs, {
      instance: "a",
      marginMs: MARGIN_MS,
      ...c.options,
    });
    for (let seq = 0; seq < 50; seq++) {
      await a.exchange(testBatch("a", seq));
      c.advance(100);
    }
    const left = raw.prepare("SELECT count(*) AS n FROM hit_log").get() as { n: number };
    // A window and the margin of rows (5), and up to two seconds of the trim's cadence (20).
    assert.ok(left.n <= 25, `${left.n} rows left`);
    a.close();
  }));

Deno.test("SqliteHitLog: a trimmer whose wall clock is a day ahead deletes no row before a window has passed", () =>
  withFile(async (path) => {
    const windowMs = 5_000;
    const c = clocks();
    const ahead = clocks(86_400_000);
    const open = (instance: string, options: typeof c.options) =>
      SqliteHitLog.open(path, windowMs, { instance, marginMs: MARGIN_MS, ...options });
    const first = open("first", c.options);
    const second = open("second", c.options);
    const early = open("ahead", ahead.options);
    try {
      for (const log of [first, second, early]) await log.exchange(null);
      await second.exchange(testBatch("second", 0));
      // The one ahead reads second#0, then trims, twice, a second apart: second#0 is a second old.
      await early.exchange(testBatch("ahead", 0));
      ahead.advance(1_000);
      await early.exchange(testBatch("ahead", 1));
      assert.deepEqual(names(await first.exchange(null)), ["second#0", "ahead#0", "ahead#1"]);
    } finally {
      for (const log of [first, second, early]) log.close();
    }
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

/** Threads that open one new file at the same instant, and rounds of it (1 to 5 s in all). */
const TOGETHER_THREADS = 3;
const TOGETHER_ROUNDS = 60;

/** Sends `message` to `thread` and resolves with its answer (rejects if the thread fails). */
function ask(thread: Worker, message: unknown): Promise<string | null> {
  return new Promise((resolve, reject) => {
    const onError = (error: Error) => {
      thread.off("message", onMessage);
      reject(error);
    };
    const onMessage = (answer: string | null) => {
      thread.off("error", onError);
      resolve(answer);
    };
    thread.once("message", onMessage);
    thread.once("error", onError);
    thread.postMessage(message);
  });
}

Deno.test("SqliteHitLog: instances that open a new file at the same instant all open it (SQLite refuses a switch to WAL at once then)", async () => {
  // Without the retry, 5 to 7 of 60 rounds of three processes failed with "database is locked" in
  // a few ms, and most rounds of these threads did. Slower (1 to 5 s) for its 60 rounds: one round
  // in ten or so failed, so fewer could pass by chance.
  const threads = Array.from(
    { length: TOGETHER_THREADS },
    () => new Worker(new URL("./_sqlite_open_worker.ts", import.meta.url)),
  );
  const dir = tempDir();
  try {
    const failures: string[] = [];
    for (let round = 0; round < TOGETHER_ROUNDS; round++) {
      const path = join(dir, `${round}.sqlite3`);
      const at = Date.now() + 15;
      const answers = await Promise.all(threads.map((thread) => ask(thread, { path, at })));
      for (const answer of answers) if (answer !== null) failures.push(`round ${round}: ${answer}`);
    }
    assert.deepEqual(failures, []);
  } finally {
    await Promise.all(threads.map((thread) => thread.terminate()));
    rmSync(dir, { recursive: true, force: true });
  }
});
