/**
 * A spray of new IPv6 /64s on the Worker, with and without the new callers' budget
 * (`deno task bench:worker-new-callers`; lib/workers/new_caller_gate.ts): two Workers on workerd in
 * one run, the shipped one (wrangler.json's `NEW_CALLERS` binding) and the same without the
 * binding, sprayed in alternating rounds. Each round sends `--callers` new /64s of a fresh /48 one
 * request each (8 at a time), then each of them a second request; it counts the answers and times
 * workerd's CPU per request (`/proc/<pid>/stat`, user + system, over the round). Then returning
 * callers' requests (callers their objects hold), timed from outside, one to each Worker in turn:
 * the gate must cost a returning caller nothing. Last, with workerd stopped, the objects that
 * wrote storage: each Worker's objects persist in a folder of their own, one SQLite file per
 * object, and an object that wrote a caller's log holds a `c:` key (miniflare's proxy to the
 * objects' own `usage()` gives out after a few thousand calls under Deno).
 *
 * Prints a Markdown table, with the cost per million sprayed requests counted from the objects
 * created and the prices of lib/limit/README.md ("The cost per million requests"). Bounded:
 * `--rounds` (at most 6) x `--callers` (at most 2,000) per Worker, to 127.0.0.1 only.
 *
 * @module
 */
// deno-lint-ignore-file no-console -- a benchmark's report

import { DatabaseSync } from "node:sqlite";
import { parseArgs } from "node:util";
import { buildWorker } from "../../lib/build/worker.ts";
import { type ServedWorker, serveWorker } from "../../lib/build/worker_dev.ts";
import { ROOT } from "../_deno_info.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    rounds: { type: "string", default: "3" },
    callers: { type: "string", default: "500" },
  },
});
const ROUNDS = Math.min(6, Math.max(1, Number(values.rounds)));
const CALLERS = Math.min(2_000, Math.max(10, Number(values.callers)));
const CONCURRENCY = 8;
/** `sysconf(_SC_CLK_TCK)` on Linux. */
const CLOCK_TICKS = 100;
/** The prices of lib/limit/README.md's cost table, $ per million. */
const PRICE = { request: 0.30, cpu: 0.016, object: 0.15, duration: 0.002, row: 1.00, log: 0.60 };

/** User + system CPU seconds of `pid` so far. */
async function cpuSeconds(pid: number): Promise<number> {
  const out = await new Deno.Command("cat", { args: [`/proc/${pid}/stat`], stdout: "piped" })
    .output();
  const stat = new TextDecoder().decode(out.stdout);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

/** The workerd processes among this process's children. */
async function workerdPids(): Promise<number[]> {
  const out = await new Deno.Command("pgrep", { args: ["-P", String(Deno.pid), "workerd"] })
    .output();
  return new TextDecoder().decode(out.stdout).split("\n").filter(Boolean).map(Number);
}

/** A served Worker, its workerd process and where its objects persist. */
interface Served {
  label: string;
  served: ServedWorker;
  pid: number;
  persist: string;
}

async function start(label: string, gate: boolean): Promise<Served> {
  const before = new Set(await workerdPids());
  const persist = await Deno.makeTempDir({ prefix: "worker-new-callers-" });
  const served = await serveWorker({
    root: ROOT,
    port: 0,
    persist,
    bindings: { PUBLIC_BASE_URL: "http://127.0.0.1", ACCESS_LOG: "false" },
    ...(gate ? {} : { ratelimits: false as const }),
  });
  const pid = (await workerdPids()).find((pid) => !before.has(pid));
  if (pid === undefined) throw new Error("no workerd process");
  return { label, served, pid, persist };
}

/** The objects under `persist` that wrote a caller's log (a `c:` key), workerd stopped. */
async function objectsWritten(persist: string): Promise<number> {
  let written = 0;
  for await (const folder of Deno.readDir(persist)) {
    if (!folder.isDirectory) continue;
    for await (const file of Deno.readDir(`${persist}/${folder.name}`)) {
      if (!file.name.endsWith(".sqlite") || file.name === "metadata.sqlite") continue;
      const db = new DatabaseSync(`${persist}/${folder.name}/${file.name}`);
      try {
        const table = db.prepare("SELECT 1 FROM sqlite_master WHERE name = '_cf_KV'").get();
        if (table && db.prepare("SELECT 1 FROM _cf_KV WHERE key LIKE 'c:%' LIMIT 1").get()) {
          written++;
        }
      } finally {
        db.close();
      }
    }
  }
  return written;
}

/** Sends one request from each of `addresses`, `CONCURRENCY` at a time; statuses and ms each. */
async function spray(url: URL, addresses: string[]): Promise<{ statuses: number[]; ms: number[] }> {
  const statuses: number[] = [];
  const ms: number[] = [];
  let next = 0;
  const lane = async () => {
    while (next < addresses.length) {
      const address = addresses[next++]!;
      const started = performance.now();
      const response = await fetch(url, { headers: { "cf-connecting-ip": address } });
      await response.arrayBuffer();
      ms.push(performance.now() - started);
      statuses.push(response.status);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, lane));
  return { statuses, ms };
}

/** What one round of one Worker measured. */
interface Round {
  admitted: number;
  refused: number;
  cpuUs: number;
  held: string[];
}

async function round(worker: Served, net: number): Promise<Round> {
  const url = new URL("/api/v1/platform", worker.served.url);
  const addresses = Array.from(
    { length: CALLERS },
    (_, i) => `2001:db8:${net.toString(16)}:${i.toString(16)}::1`,
  );
  const before = await cpuSeconds(worker.pid);
  const first = await spray(url, addresses);
  const second = await spray(url, addresses);
  const cpu = (await cpuSeconds(worker.pid)) - before;
  const all = [...first.statuses, ...second.statuses];
  return {
    admitted: all.filter((s) => s === 200).length,
    refused: all.filter((s) => s === 429).length,
    cpuUs: cpu / (2 * CALLERS) * 1e6,
    held: addresses.filter((_, i) => first.statuses[i] === 200),
  };
}

/**
 * The time of a returning caller's request (one its object holds: the gate is never asked) on each
 * Worker, `passes` times over `count` callers of each, one request to each Worker in turn.
 */
async function returning(workers: Served[], held: string[][], count: number, passes: number) {
  const ms = workers.map(() => [] as number[]);
  for (let pass = 0; pass < passes; pass++) {
    for (let i = 0; i < count; i++) {
      for (const [w, worker] of workers.entries()) {
        const url = new URL("/api/v1/platform", worker.served.url);
        const started = performance.now();
        const response = await fetch(url, { headers: { "cf-connecting-ip": held[w]![i]! } });
        await response.arrayBuffer();
        ms[w]!.push(performance.now() - started);
      }
    }
  }
  return ms;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

await buildWorker(ROOT);
const gated = await start("with NEW_CALLERS (shipped)", true);
const open = await start("without the binding", false);
const results = new Map<Served, Round[]>([[gated, []], [open, []]]);
const returningOf = new Map<Served, number[]>();
try {
  let net = 0x6000;
  for (let r = 0; r < ROUNDS; r++) {
    // Alternating, each on a /48 of its own: a round sees the budget of a fresh /48.
    for (const worker of r % 2 === 0 ? [gated, open] : [open, gated]) {
      results.get(worker)!.push(await round(worker, net++));
    }
  }
  // As many returning callers of each as the gate let through, 5 passes: within the limit of 60.
  const held = [gated, open].map((worker) => results.get(worker)!.flatMap((r) => r.held));
  const count = Math.min(held[0]!.length, held[1]!.length, 20);
  const returningMs = await returning([gated, open], held, count, 5);
  returningOf.set(gated, returningMs[0]!).set(open, returningMs[1]!);
} finally {
  await gated.served.close();
  await open.served.close();
}
console.log(
  `| ${CALLERS} new /64s of one /48, each 2 requests, ${ROUNDS} rounds | admitted | refused | objects written | workerd CPU per request | $ per million sprayed requests (counted) | returning caller, median ms (interleaved) |`,
);
console.log("|---|---:|---:|---:|---:|---:|---:|");
for (const [worker, rounds] of results) {
  const sum = (f: (r: Round) => number) => rounds.reduce((a, r) => a + f(r), 0);
  const requests = 2 * CALLERS * rounds.length;
  const objects = await objectsWritten(worker.persist);
  await Deno.remove(worker.persist, { recursive: true });
  const admitted = sum((r) => r.admitted);
  // Every request: the Worker's request, CPU and its invocation's log event. A new caller's object
  // writes two rows (its log, its alarm) and runs its alarm a day later (an object request and two
  // rows); a returning caller admitted writes one. Every request the object was asked costs an
  // object request: all but a refused caller's second, answered from the isolate's memory.
  const refusedCallers = CALLERS * rounds.length - objects;
  const objectCalls = requests - refusedCallers;
  const dollars = requests * (PRICE.request + PRICE.cpu + PRICE.log) +
    objectCalls * (PRICE.object + PRICE.duration) +
    objects * (2 * PRICE.row + PRICE.object + 2 * PRICE.row) +
    (admitted - objects) * PRICE.row;
  console.log(
    `| ${worker.label} | ${admitted} | ${sum((r) => r.refused)} | ${objects} | ${
      median(rounds.map((r) => r.cpuUs)).toFixed(0)
    } µs | ${(dollars / requests).toFixed(2)} | ${median(returningOf.get(worker)!).toFixed(2)} |`,
  );
}
