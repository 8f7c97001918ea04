/**
 * Figures of the Durable Object store on local workerd (lib/limit/README.md, "Durable Objects on
 * Workers"): the time per decision as the Worker sees it, for a caller whose object is warm
 * (admitted, so its log is written; refused, so nothing is), for a caller never seen (its object is
 * created), and for 1,000 callers over 16 shards; the storage one caller's object takes on disk;
 * workerd's memory per object.
 *
 * workerd's clock moves in whole milliseconds (a Spectre mitigation), so the Worker times batches
 * of 10 decisions one after the other and a decision's time is its batch's mean: the median and p99
 * are over batches. Local means no network between the Worker and the object: on Cloudflare an
 * object is in one place, and a request from elsewhere adds the distance to it.
 *
 * Run: `deno task bench:durable` (about 30 seconds). Options: `--batches=200`.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import {
  buildLimiterWorker,
  getJson,
  startLimiterWorkerd,
  type WorkerdOptions,
} from "../workers/_limiter_workerd.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: { batches: { type: "string", default: "200" } },
});
const BATCHES = Number(values.batches);
const BATCH = 10;

const script = await buildLimiterWorker();

/** Median and p99 of `samples`, in ms. */
function summary(samples: number[]): { median: number; p99: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return { median: at(0.5), p99: at(0.99) };
}

/** Runs `body` on a workerd started with `options` over a fresh folder. */
async function withWorkerd<T>(
  options: Omit<WorkerdOptions, "script" | "persist">,
  body: (url: URL, persist: string) => Promise<T>,
): Promise<T> {
  const persist = await Deno.makeTempDir({ prefix: "limiter-bench-" });
  const workerd = await startLimiterWorkerd({ script, persist, ...options });
  try {
    return await body(workerd.urls[0]!, persist);
  } finally {
    await workerd.dispose();
    await Deno.remove(persist, { recursive: true });
  }
}

/** A row of the table: the Worker's per-decision times, and their mean timed from here. */
interface Row {
  median: number;
  p99: number;
  /** The run's wall time seen from this process over its decisions (one HTTP request included). */
  mean: number;
}

/** The per-decision times of `BATCHES` batches through `/many` with `query`. */
async function timed(url: URL, query: string): Promise<Row> {
  const started = performance.now();
  const { ms } = await getJson<{ ms: number[] }>(
    url,
    `/many?n=${BATCH}&batches=${BATCHES}&${query}`,
  );
  const mean = (performance.now() - started) / (BATCH * BATCHES);
  return { ...summary(ms), mean };
}

/** Bytes of every file under `dir`. */
function bytesUnder(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    total += entry.isDirectory() ? bytesUnder(path) : statSync(path).size;
  }
  return total;
}

/** The resident memory of this process's workerd child, in bytes (Linux). */
function workerdRss(): number {
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[1]) !== Deno.pid || !stat.includes("(workerd)")) continue;
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) * 1024;
    } catch {
      // A process that ended meanwhile.
    }
  }
  throw new Error("no workerd child found");
}

const rows: Array<[string, Row]> = [];
const total = BATCHES * BATCH;

await withWorkerd({ limit: 10_000 }, async (url) => {
  await timed(url, "key=warm-up");
  rows.push(["one caller, its object warm, admitted (log written)", await timed(url, "key=a")]);
  rows.push(["a new caller each time (object created)", await timed(url, "key=n&fresh=1")]);
  await timed(url, "key=c&callers=1000");
  rows.push([
    "1,000 callers, an object each (warm), admitted",
    await timed(url, "key=c&callers=1000"),
  ]);
});
await withWorkerd({ limit: 60 }, async (url) => {
  await timed(url, "key=r"); // spends the caller's 60
  rows.push(["one caller, its object warm, refused (nothing written)", await timed(url, "key=r")]);
});
await withWorkerd({ limit: 10_000, shards: 16 }, async (url) => {
  await timed(url, "key=s&callers=1000");
  rows.push([
    "1,000 callers over 16 shards (warm), admitted",
    await timed(url, "key=s&callers=1000"),
  ]);
});
const storage = await withWorkerd({ limit: 60 }, async (url, persist) => {
  const empty = bytesUnder(persist);
  for (let i = 0; i < 60; i++) await getJson(url, "/hit?key=192.0.2.1");
  const one = bytesUnder(persist) - empty;
  const before = workerdRss();
  await timed(url, "key=m&fresh=1"); // `total` objects, one request each
  const perObject = (workerdRss() - before) / total;
  return { one, perObject };
});

console.log(`Durable Object store on local workerd: ${BATCHES} batches of ${BATCH} decisions`);
console.log("| Decision | median (ms) | p99 (ms) | mean from outside (ms) |");
console.log("| --- | ---: | ---: | ---: |");
for (const [label, { median, p99, mean }] of rows) {
  console.log(`| ${label} | ${median.toFixed(2)} | ${p99.toFixed(2)} | ${mean.toFixed(3)} |`);
}
console.log(
  `one caller's object, 60 requests counted: ${storage.one} bytes on disk (SQLite files)`,
);
console.log(
  `workerd memory per object (${total} objects): ${(storage.perObject / 1024).toFixed(1)} KiB`,
);
