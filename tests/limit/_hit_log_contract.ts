/**
 * The contract of a shared hit log (`lib/limit/core/hit_log.ts`), as one suite any store's log runs:
 * the first exchange replays the window whoever wrote it, no batch is returned twice or lost, an
 * instance never reads its own, batches come in the order they were appended (per writer, and
 * across writers when their appends were one after another), a batch sent again after a failed
 * exchange is kept once, a batch leaves the log a window (plus the stated margin) after it was
 * appended, a writer that restarts under a new id is read as a new writer whose predecessor's batches
 * it replays, and several writers append at once: logs of one process exchanging concurrently, and
 * two real OS processes appending to one store while a third reads.
 *
 * A store's test calls {@linkcode testHitLogContract} with a factory of fresh, empty shared stores
 * (each opens any number of logs on it, one connection each, as separate processes would) and, for
 * the two-process case, the command of a writer process that calls {@linkcode hitLogWriterMain}.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { HitLog, LogBatch } from "../../lib/limit/core/hit_log.ts";

/** One fresh, empty shared store on which logs are opened. */
export interface HitLogStore {
  /**
   * Opens one log per instance id on this store, each over its own connection (as separate
   * processes would have), with the window `windowMs`.
   */
  open(instances: readonly string[], windowMs: number): Promise<HitLog[]>;
  /**
   * The command of another OS process that opens a log on this store and runs
   * {@linkcode hitLogWriterMain} with `args` (passed on as it likes, e.g. as a JSON argument);
   * stdout piped. Omitted: the two-process case is skipped.
   */
  writerCommand?(args: HitLogWriterArgs): Deno.Command;
  /** Releases the store (a temporary file, a key prefix). */
  close(): Promise<void>;
}

/** What one store's test gives the suite. */
export interface HitLogContract {
  /** Prefix of every test's name, e.g. `"KvHitLog"`. */
  name: string;
  /** Opens a fresh, empty store for one test. */
  newStore(): Promise<HitLogStore>;
  /**
   * How long past the window a batch may still be replayed to a log opened afterwards: the margin
   * the log states plus any lag of the store's expiry.
   */
  replayMarginMs: number;
  /** A reason to skip the whole suite (a missing tool), or undefined to run it. */
  skip?: string | undefined;
}

/** The arguments of a writer in another process ({@linkcode hitLogWriterMain}). */
export interface HitLogWriterArgs {
  /** Its instance id. */
  instance: string;
  /** The window of its log, in ms. */
  windowMs: number;
  /** It appends batches 0 to `batches - 1`, one per exchange. */
  batches: number;
  /** Bytes of each batch's hits. */
  bytes: number;
  /** How many batches it must read from each other writer before it stops. */
  expect: Record<string, number>;
  /** Pause between exchanges, in ms. */
  pauseMs: number;
  /** It gives up waiting for `expect` after this long, in ms. */
  deadlineMs: number;
}

/** What a writer process prints on stdout as JSON: the batches it read, as `instance#seq`. */
export interface HitLogWriterReport {
  received: string[];
  corrupt: string[];
}

/** A long window for the cases that do not test expiry: nothing leaves the log during them. */
const WINDOW_MS = 60_000;

/** A batch whose bytes name its writer and number, so that what is read can be checked intact. */
export function testBatch(instance: string, seq: number, bytes = 64): LogBatch {
  const hits = new Uint8Array(bytes);
  const head = new TextEncoder().encode(`${instance}#${seq}|`);
  if (head.length > bytes) throw new RangeError(`a test batch needs at least ${head.length} bytes`);
  hits.set(head);
  for (let i = head.length; i < bytes; i++) hits[i] = (i * 31 + seq) & 0xff;
  return { instance, seq, hits };
}

/** `instance#seq` of a batch. */
export function idOf(batch: LogBatch): string {
  return `${batch.instance}#${batch.seq}`;
}

/** Whether a batch read back holds exactly what {@linkcode testBatch} wrote for it. */
export function isIntact(batch: LogBatch): boolean {
  const expected = testBatch(batch.instance, batch.seq, batch.hits.length).hits;
  return batch.hits.length === expected.length && batch.hits.every((b, i) => b === expected[i]);
}

function ids(batches: readonly LogBatch[]): string[] {
  return batches.map(idOf);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Runs `body` on a fresh store and its logs, closing every log and the store afterwards. */
async function withStore(
  contract: HitLogContract,
  body: (store: HitLogStore, opened: HitLog[]) => Promise<void>,
): Promise<void> {
  const store = await contract.newStore();
  const opened: HitLog[] = [];
  try {
    await body(store, opened);
  } finally {
    for (const log of opened) await log.close();
    await store.close();
  }
}

/** Opens logs and remembers them for closing. */
async function open(
  store: HitLogStore,
  opened: HitLog[],
  instances: readonly string[],
  windowMs = WINDOW_MS,
): Promise<HitLog[]> {
  const logs = await store.open(instances, windowMs);
  opened.push(...logs);
  return logs;
}

/**
 * Checks what one reader got: each batch of every other writer exactly once, intact, in each
 * writer's order, and none of its own.
 */
function assertDelivered(
  reader: string,
  got: readonly LogBatch[],
  appended: ReadonlyMap<string, number>,
): void {
  const seen = new Set<string>();
  const next = new Map<string, number>();
  for (const batch of got) {
    const id = idOf(batch);
    assert.notEqual(batch.instance, reader, `${reader} read its own batch ${id}`);
    assert.ok(!seen.has(id), `${reader} read ${id} twice`);
    seen.add(id);
    assert.ok(isIntact(batch), `${reader} read ${id} altered`);
    const expected = next.get(batch.instance) ?? 0;
    assert.equal(batch.seq, expected, `${reader} read ${id} out of its writer's order`);
    next.set(batch.instance, expected + 1);
  }
  for (const [writer, count] of appended) {
    if (writer === reader) continue;
    assert.equal(next.get(writer) ?? 0, count, `${reader} read ${writer}'s batches`);
  }
}

/** Registers the suite's tests for one store's log. */
export function testHitLogContract(contract: HitLogContract): void {
  const test = (name: string, fn: () => Promise<void>) =>
    Deno.test({ name: `${contract.name}: ${name}`, ignore: contract.skip !== undefined, fn });
  if (contract.skip !== undefined) {
    // deno-lint-ignore no-console
    console.log(`${contract.name} contract skipped: ${contract.skip}`);
  }

  test("an exchange returns the others' new batches in the order they were appended", () =>
    withStore(contract, async (store, opened) => {
      const [a, b] = await open(store, opened, ["a", "b"]);
      assert.deepEqual(ids(await a!.exchange(testBatch("a", 0))), []);
      assert.deepEqual(ids(await b!.exchange(testBatch("b", 0))), ["a#0"]);
      assert.deepEqual(ids(await a!.exchange(testBatch("a", 1))), ["b#0"]);
      assert.deepEqual(ids(await a!.exchange(testBatch("a", 2))), []);
      assert.deepEqual(ids(await b!.exchange(null)), ["a#1", "a#2"]);
      assert.deepEqual(ids(await b!.exchange(null)), []);
      assert.deepEqual(ids(await a!.exchange(null)), []);
    }));

  test("the first exchange replays the window, every writer's, in append order, never its own", () =>
    withStore(contract, async (store, opened) => {
      const [a, b] = await open(store, opened, ["a", "b"]);
      await a!.exchange(testBatch("a", 0));
      await b!.exchange(testBatch("b", 0));
      await a!.exchange(testBatch("a", 1));
      await b!.exchange(testBatch("b", 1));
      assert.deepEqual(ids(await a!.exchange(testBatch("a", 2))), ["b#1"]);
      const all = ["a#0", "b#0", "a#1", "b#1", "a#2"];
      const [c, d] = await open(store, opened, ["c", "d"]);
      const replayed = await c!.exchange(null);
      assert.deepEqual(ids(replayed), all);
      assert.ok(replayed.every(isIntact));
      // A first exchange that appends replays the same and not the batch it brings.
      assert.deepEqual(ids(await d!.exchange(testBatch("d", 0))), all);
      assert.deepEqual(ids(await c!.exchange(null)), ["d#0"]);
      assert.deepEqual(ids(await a!.exchange(null)), ["d#0"]);
    }));

  test("a batch sent again after a failed exchange is kept once", () =>
    withStore(contract, async (store, opened) => {
      const [a, b] = await open(store, opened, ["a", "b"]);
      // Sent again after the reader read it...
      await a!.exchange(testBatch("a", 0));
      assert.deepEqual(ids(await b!.exchange(null)), ["a#0"]);
      await a!.exchange(testBatch("a", 0));
      assert.deepEqual(ids(await b!.exchange(null)), []);
      // ...and before.
      await a!.exchange(testBatch("a", 1));
      await a!.exchange(testBatch("a", 1));
      await a!.exchange(testBatch("a", 2));
      assert.deepEqual(ids(await b!.exchange(null)), ["a#1", "a#2"]);
      const [c] = await open(store, opened, ["c"]);
      assert.deepEqual(ids(await c!.exchange(null)), ["a#0", "a#1", "a#2"]);
    }));

  test("a writer restarted under a new id replays its predecessor's window; the others read both", () =>
    withStore(contract, async (store, opened) => {
      const [a, b] = await open(store, opened, ["a", "b"]);
      for (let seq = 0; seq < 3; seq++) await a!.exchange(testBatch("a", seq));
      await b!.exchange(testBatch("b", 0));
      assert.deepEqual(ids(await b!.exchange(null)), []);
      await a!.close();
      opened.splice(opened.indexOf(a!), 1);
      const [a2] = await open(store, opened, ["a2"]);
      assert.deepEqual(ids(await a2!.exchange(testBatch("a2", 0))), ["a#0", "a#1", "a#2", "b#0"]);
      assert.deepEqual(ids(await b!.exchange(null)), ["a2#0"]);
    }));

  test("a batch leaves the log a window (plus the stated margin) after it was appended", () =>
    withStore(contract, async (store, opened) => {
      const windowMs = 400;
      const [a] = await open(store, opened, ["a"], windowMs);
      await a!.exchange(testBatch("a", 0));
      await sleep(windowMs + contract.replayMarginMs + 50);
      await a!.exchange(testBatch("a", 1));
      const [b] = await open(store, opened, ["b"], windowMs);
      assert.deepEqual(ids(await b!.exchange(null)), ["a#1"]);
    }));

  test("a batch of maxBatchBytes arrives intact", () =>
    withStore(contract, async (store, opened) => {
      const [a, b] = await open(store, opened, ["a", "b"]);
      assert.ok(a!.maxBatchBytes >= 16 * 1024, "room for a 250 ms batch of 2,000 hits");
      await a!.exchange(testBatch("a", 0, a!.maxBatchBytes));
      const [got] = await b!.exchange(null);
      assert.equal(got?.hits.length, a!.maxBatchBytes);
      assert.ok(isIntact(got!));
    }));

  test("every batch reaches every other reader once across many rounds, one after another", () =>
    withStore(contract, async (store, opened) => {
      const names = ["a", "b", "c"];
      const logs = await open(store, opened, names);
      const got = new Map(names.map((n) => [n, [] as LogBatch[]]));
      const appended = new Map(names.map((n) => [n, 0]));
      // A fixed, irregular schedule: some rounds a log only reads, some it appends.
      for (let round = 0; round < 30; round++) {
        for (let i = 0; i < names.length; i++) {
          const name = names[(i + round) % names.length]!;
          const appends = (round * 7 + i * 3) % 4 !== 0;
          const seq = appended.get(name)!;
          const mine = appends ? testBatch(name, seq) : null;
          if (appends) appended.set(name, seq + 1);
          got.get(name)!.push(...await logs[names.indexOf(name)]!.exchange(mine));
        }
      }
      for (const [i, log] of logs.entries()) got.get(names[i]!)!.push(...await log.exchange(null));
      for (const name of names) assertDelivered(name, got.get(name)!, appended);
    }));

  test("logs exchanging concurrently each read every other batch once", () =>
    withStore(contract, async (store, opened) => {
      const names = ["a", "b", "c", "d"];
      const logs = await open(store, opened, names);
      const got = new Map(names.map((n) => [n, [] as LogBatch[]]));
      const appended = new Map(names.map((n) => [n, 0]));
      const rounds = 25;
      await Promise.all(logs.map(async (log, i) => {
        const name = names[i]!;
        for (let seq = 0; seq < rounds; seq++) {
          got.get(name)!.push(...await log.exchange(testBatch(name, seq, 512)));
          appended.set(name, seq + 1);
          if ((seq + i) % 3 === 0) got.get(name)!.push(...await log.exchange(null));
        }
      }));
      for (const [i, log] of logs.entries()) got.get(names[i]!)!.push(...await log.exchange(null));
      for (const name of names) assertDelivered(name, got.get(name)!, appended);
    }));

  test("two OS processes append to one store at once; a third reader and each of them read all", () =>
    withStore(contract, async (store, opened) => {
      if (store.writerCommand === undefined) {
        // deno-lint-ignore no-console
        console.log(`${contract.name}: no writer process given: two-process case skipped`);
        return;
      }
      const batches = 40;
      const bytes = 4096;
      const writers = ["p", "q"];
      const [reader] = await open(store, opened, ["r"]);
      await reader!.exchange(null);
      const children = writers.map((instance) =>
        store.writerCommand!({
          instance,
          windowMs: WINDOW_MS,
          batches,
          bytes,
          expect: Object.fromEntries(
            writers.filter((w) => w !== instance).map((w) => [w, batches]),
          ),
          pauseMs: 5,
          deadlineMs: 30_000,
        }).spawn()
      );
      const got: LogBatch[] = [];
      const outputs = Promise.all(children.map((child) => child.output()));
      const deadline = Date.now() + 30_000;
      while (got.length < batches * writers.length && Date.now() < deadline) {
        got.push(...await reader!.exchange(null));
        await sleep(10);
      }
      const appended = new Map(writers.map((w) => [w, batches]));
      assertDelivered("r", got, appended);
      for (const [i, output] of (await outputs).entries()) {
        const stderr = new TextDecoder().decode(output.stderr);
        assert.equal(output.code, 0, `writer ${writers[i]} failed: ${stderr}`);
        const report = JSON.parse(new TextDecoder().decode(output.stdout)) as HitLogWriterReport;
        assert.deepEqual(report.corrupt, [], `${writers[i]} read altered batches`);
        const other = writers.find((w) => w !== writers[i])!;
        assert.deepEqual(
          report.received,
          Array.from({ length: batches }, (_, s) => `${other}#${s}`),
        );
      }
    }));
}

/**
 * The body of a writer process: appends `args.batches` batches, one per exchange, then keeps
 * exchanging until it has read `args.expect` (or the deadline), and prints its
 * {@linkcode HitLogWriterReport} as JSON on stdout. `open` opens its log on the shared store.
 */
export async function hitLogWriterMain(
  args: HitLogWriterArgs,
  open: (instance: string, windowMs: number) => Promise<HitLog>,
): Promise<void> {
  const log = await open(args.instance, args.windowMs);
  const received: string[] = [];
  const corrupt: string[] = [];
  const counts = new Map<string, number>();
  const take = (batches: LogBatch[]) => {
    for (const batch of batches) {
      received.push(idOf(batch));
      if (!isIntact(batch)) corrupt.push(idOf(batch));
      counts.set(batch.instance, (counts.get(batch.instance) ?? 0) + 1);
    }
  };
  const done = () =>
    Object.entries(args.expect).every(([writer, count]) => (counts.get(writer) ?? 0) >= count);
  for (let seq = 0; seq < args.batches; seq++) {
    take(await log.exchange(testBatch(args.instance, seq, args.bytes)));
    await sleep(args.pauseMs);
  }
  const deadline = Date.now() + args.deadlineMs;
  while (!done() && Date.now() < deadline) {
    take(await log.exchange(null));
    await sleep(args.pauseMs);
  }
  await log.close();
  // deno-lint-ignore no-console
  console.log(JSON.stringify({ received, corrupt } satisfies HitLogWriterReport));
}
