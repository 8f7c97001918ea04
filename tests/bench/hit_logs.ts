/**
 * The hit logs of a file on one machine, side by side in one run: the SQLite hit log
 * (`lib/limit/sqlite/sqlite_hit_log.ts`, `node:sqlite`) beside the Deno KV one
 * (`lib/limit/kv/kv_hit_log.ts`) on the same operations, in interleaved rounds. Under Deno, the KV
 * log runs over `Deno.openKv`; under Node (`node tests/bench/hit_logs.ts`, type stripping), over
 * `@deno/kv` from npm (installed into a temporary folder at the version below, not a dependency of
 * the project): the two ways Node could share the VM recipe's limit without Redis.
 *
 * Each round, on a fresh file per log: a writer and a reader on their own connections, as two
 * processes would be. Timed per operation: `append` (an exchange that sends one batch of
 * `--bytes`, about 2,700 IPv4 hits at 16 KiB, and finds nothing new), `read-since` (an exchange
 * that sends nothing and reads the one batch appended since), `replay` (a new reader's first
 * exchange on a log of 64 such batches). Reported: the median of each over the rounds, and KV's
 * median over SQLite's (the ratio; above 1, SQLite is faster). `node:sqlite` is synchronous, so its
 * time is also time the event loop is blocked; KV's calls are asynchronous.
 *
 * Run: `flock /tmp/s46-bench.lock deno run -A tests/bench/hit_logs.ts` and
 * `flock /tmp/s46-bench.lock npx -y node@24 tests/bench/hit_logs.ts` (`--rounds=15 --ops=200`).
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { HitLog } from "../../lib/limit/core/hit_log.ts";
import { KvHitLog } from "../../lib/limit/kv/kv_hit_log.ts";
import { SqliteHitLog } from "../../lib/limit/sqlite/sqlite_hit_log.ts";

/** The `@deno/kv` measured under Node. */
const DENO_KV_NPM = "@deno/kv@0.14.0";

const { values } = parseArgs({
  args: typeof Deno === "undefined" ? process.argv.slice(2) : Deno.args,
  options: {
    rounds: { type: "string", default: "15" },
    ops: { type: "string", default: "200" },
    bytes: { type: "string", default: String(16 * 1024) },
  },
});
const ROUNDS = Number(values.rounds);
const OPS = Number(values.ops);
const BYTES = Number(values.bytes);
const WINDOW_MS = 60_000;
const REPLAY_BATCHES = 64;

type Opener = (path: string, instance: string) => Promise<HitLog>;

/** Opens a KV database: Deno's own, or `@deno/kv` installed into `dir` under Node. */
async function kvOpener(dir: string): Promise<{ name: string; open: Opener }> {
  if (typeof Deno !== "undefined" && typeof Deno.openKv === "function") {
    return {
      name: "Deno KV (Deno.openKv)",
      open: async (path, instance) =>
        new KvHitLog(await Deno.openKv(path), WINDOW_MS, { instance, ownsKv: true }),
    };
  }
  execFileSync("npm", ["install", "--prefix", dir, "--no-audit", "--no-fund", DENO_KV_NPM], {
    stdio: "ignore",
  });
  // A path, not a name: the package is not the project's dependency (nor in its lock).
  const module = join(dir, "node_modules", "@deno", "kv", "esm", "npm.js");
  const { openKv } = await import(module) as {
    openKv(path: string): Promise<Deno.Kv>;
  };
  return {
    name: `${DENO_KV_NPM} (npm, Node)`,
    open: async (path, instance) =>
      new KvHitLog(await openKv(path), WINDOW_MS, { instance, ownsKv: true }),
  };
}

const sqliteOpener: Opener = (path, instance) =>
  Promise.resolve(SqliteHitLog.open(path, WINDOW_MS, { instance }));

function batch(instance: string, seq: number) {
  const hits = new Uint8Array(BYTES);
  for (let i = 0; i < BYTES; i++) hits[i] = (i * 31 + seq) & 0xff;
  return { instance, seq, hits };
}

/** Median time per operation in ms, of one log kind on a fresh file in `dir`. */
async function round(open: Opener, dir: string, tag: string): Promise<Record<string, number>> {
  const path = join(dir, `${tag}.db`);
  const writer = await open(path, "w");
  const reader = await open(path, "r");
  let seq = 0;
  await reader.exchange(null);
  const append: number[] = [];
  const readSince: number[] = [];
  for (let i = 0; i < OPS; i++) {
    let t = performance.now();
    await writer.exchange(batch("w", seq++));
    append.push(performance.now() - t);
    t = performance.now();
    const got = await reader.exchange(null);
    readSince.push(performance.now() - t);
    if (got.length !== 1) throw new Error(`${tag}: read ${got.length} batches, not 1`);
  }
  const replayed = await open(join(dir, `${tag}-replay.db`), "w2");
  for (let i = 0; i < REPLAY_BATCHES; i++) await replayed.exchange(batch("w2", i));
  const fresh = await open(join(dir, `${tag}-replay.db`), "r2");
  const t = performance.now();
  const got = await fresh.exchange(null);
  const replay = performance.now() - t;
  if (got.length !== REPLAY_BATCHES) throw new Error(`${tag}: replayed ${got.length}`);
  for (const log of [writer, reader, replayed, fresh]) await log.close();
  return { append: median(append), "read-since": median(readSince), replay };
}

function median(xs: number[]): number {
  const sorted = xs.toSorted((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

const dir = mkdtempSync(join(tmpdir(), "hit_logs_bench_"));
try {
  const kv = await kvOpener(dir);
  const results: Record<string, Record<string, number[]>> = { sqlite: {}, kv: {} };
  for (let r = 0; r < ROUNDS; r++) {
    // Interleaved, the order alternated: neither always runs on a warmer machine.
    const order = r % 2 === 0 ? ["sqlite", "kv"] as const : ["kv", "sqlite"] as const;
    for (const kind of order) {
      const got = await round(kind === "sqlite" ? sqliteOpener : kv.open, dir, `${kind}${r}`);
      for (const [op, ms] of Object.entries(got)) (results[kind]![op] ??= []).push(ms);
    }
  }
  const runtime = typeof Deno === "undefined"
    ? `Node ${process.version}`
    : `Deno ${Deno.version.deno}`;
  console.log(
    `${runtime}, ${ROUNDS} rounds, ${OPS} operations a round, batches of ${BYTES} bytes`,
  );
  console.log(`| Operation | SQLite (node:sqlite), ms | ${kv.name}, ms | KV / SQLite |`);
  console.log("| --- | --- | --- | --- |");
  for (const op of ["append", "read-since", "replay"]) {
    const s = results.sqlite![op]!;
    const k = results.kv![op]!;
    const ratios = s.map((x, i) => k[i]! / x);
    const range = (xs: number[], d: number) =>
      `${Math.min(...xs).toFixed(d)}-${Math.max(...xs).toFixed(d)}`;
    console.log(
      `| ${op} | ${median(s).toFixed(3)} | ${median(k).toFixed(3)} | ${
        median(ratios).toFixed(1)
      } (${range(ratios, 1)}) |`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
