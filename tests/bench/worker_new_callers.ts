/**
 * A spray of new IPv6 /64s on the Worker, with and without the new callers' budget
 * (`deno task bench:worker-new-callers`; lib/workers/new_caller_gate.ts): two Workers on workerd in
 * one run, the shipped one (wrangler.json's `NEW_CALLERS` binding) and the same without the
 * binding, sprayed in alternating rounds. Each round sprays each Worker twice, each time on a
 * fresh /48: `--callers` new /64s one request each (8 at a time), then `--callers` others two
 * requests each (all once, then all again); it counts the answers, times workerd's CPU per request
 * (`/proc/<pid>/stat`, user + system, over the spray) and counts the objects that wrote storage
 * before and after each pass: each Worker's objects persist in a folder of their own, one SQLite
 * file per object, and an object that wrote a caller's log holds a `c:` key (read while workerd
 * runs, {@linkcode WrittenObjects}; miniflare's proxy to the objects' own `usage()` gives out after
 * a few thousand calls under Deno). Then returning callers' requests
 * (callers their objects hold), timed from outside, one to each Worker in turn: the gate must cost
 * a returning caller nothing.
 *
 * Prints a Markdown table, with the cost per million sprayed requests counted from the objects
 * written in each pass and the prices of lib/limit/README.md ("The cost per million requests").
 * Bounded: `--rounds` (at most 6) x 3 x `--callers` (at most 2,000) per Worker, to 127.0.0.1 only.
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
  written: WrittenObjects;
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
  return { label, served, pid, persist, written: new WrittenObjects(persist) };
}

/** When `path` (an object's SQLite file) or its write-ahead log last changed, in ms. */
async function touchedAt(path: string): Promise<number> {
  const stamps = await Promise.all(
    [path, `${path}-wal`].map((file) =>
      Deno.stat(file).then((s) => s.mtime?.getTime() ?? 0, () => 0)
    ),
  );
  return Math.max(...stamps);
}

/** Whether the object's SQLite file at `path` holds a caller's log (a `c:` key). */
function holdsCaller(path: string): boolean {
  const db = new DatabaseSync(path, { readOnly: true });
  try {
    const table = db.prepare("SELECT 1 FROM sqlite_master WHERE name = '_cf_KV'").get();
    return table !== undefined && db.prepare("SELECT 1 FROM _cf_KV WHERE key LIKE 'c:%' LIMIT 1")
          .get() !== undefined;
  } finally {
    db.close();
  }
}

/**
 * The objects under a Worker's `persist` folder that wrote a caller's log, counted as they appear:
 * each count opens only the files touched since the last (an answer leaves workerd once its write
 * is durable), so that a count between two passes takes a fraction of a second, well within the
 * 10 s after which workerd, as Cloudflare, may take an idle object out of memory.
 */
class WrittenObjects {
  readonly #written = new Set<string>();
  #scannedAt = 0;

  constructor(readonly persist: string) {}

  async count(): Promise<number> {
    // A margin for the file system's stamps and writes that landed while the last count ran.
    const since = this.#scannedAt - 2000;
    this.#scannedAt = Date.now();
    for await (const folder of Deno.readDir(this.persist)) {
      if (!folder.isDirectory) continue;
      for await (const file of Deno.readDir(`${this.persist}/${folder.name}`)) {
        const name = file.name;
        if (!name.endsWith(".sqlite") || name === "metadata.sqlite" || this.#written.has(name)) {
          continue;
        }
        const path = `${this.persist}/${folder.name}/${name}`;
        if ((await touchedAt(path)) >= since && holdsCaller(path)) this.#written.add(name);
      }
    }
    return this.#written.size;
  }
}

/** What a pass answered: each address's status, and when its request was sent and answered. */
interface Pass {
  statuses: number[];
  sentAt: number[];
  answeredAt: number[];
}

/** Sends one request from each of `addresses`, `CONCURRENCY` at a time. */
async function spray(url: URL, addresses: string[]): Promise<Pass> {
  const pass: Pass = { statuses: [], sentAt: [], answeredAt: [] };
  let next = 0;
  const lane = async () => {
    while (next < addresses.length) {
      const index = next++;
      pass.sentAt[index] = performance.now();
      const response = await fetch(url, { headers: { "cf-connecting-ip": addresses[index]! } });
      await response.arrayBuffer();
      pass.answeredAt[index] = performance.now();
      pass.statuses[index] = response.status;
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, lane));
  return pass;
}

/** The two shapes of a spray: each new /64 asks once, or twice. */
type Shape = "one" | "two";

/** What one spray of one Worker measured. */
interface Spray {
  requests: number;
  admitted: number;
  /** Objects written by the first pass, and by the end (after the second, for `two`). */
  writtenFirst: number;
  writtenEnd: number;
  /** The longest a sprayed caller sat between its first answer and its second request, in ms. */
  longestGapMs: number;
  cpuSeconds: number;
  /** The sprayed callers whose objects hold them at the end (written). */
  held: string[];
}

async function sprayOnce(worker: Served, net: number, shape: Shape): Promise<Spray> {
  const url = new URL("/api/v1/platform", worker.served.url);
  const addresses = Array.from(
    { length: CALLERS },
    (_, i) => `2001:db8:${net.toString(16)}:${i.toString(16)}::1`,
  );
  const before = await worker.written.count();
  const cpuBefore = await cpuSeconds(worker.pid);
  const first = await spray(url, addresses);
  let cpu = (await cpuSeconds(worker.pid)) - cpuBefore;
  const writtenFirst = (await worker.written.count()) - before;
  const statuses = [...first.statuses];
  let longestGapMs = 0;
  if (shape === "two") {
    const cpuAgain = await cpuSeconds(worker.pid);
    const second = await spray(url, addresses);
    cpu += (await cpuSeconds(worker.pid)) - cpuAgain;
    statuses.push(...second.statuses);
    const gaps = second.sentAt.map((at, i) => at - first.answeredAt[i]!);
    longestGapMs = Math.max(...gaps);
  }
  const writtenEnd = (await worker.written.count()) - before;
  return {
    requests: statuses.length,
    admitted: statuses.filter((s) => s === 200).length,
    writtenFirst,
    writtenEnd,
    longestGapMs,
    cpuSeconds: cpu,
    held: shape === "two" ? addresses : [],
  };
}

/**
 * What `sprays` cost, $ per million of their requests, at the prices of lib/limit/README.md. Every
 * request: the Worker's request, CPU and its invocation's log event, and an object request (none
 * is refused: nothing is answered from the isolate's memory). Rows: an object written at a first
 * request writes two (its log, its alarm) and its second request one; a caller kept in memory
 * writes nothing at its first request and two at its second. Each object written runs its alarm a
 * day later: an object request and two rows (`deleteAll`).
 */
function dollarsPerMillion(sprays: Spray[], shape: Shape): number {
  let dollars = 0;
  let requests = 0;
  for (const s of sprays) {
    const perRequest = PRICE.request + PRICE.cpu + PRICE.log + PRICE.object + PRICE.duration;
    const rows = shape === "one"
      ? 2 * s.writtenFirst
      : 3 * s.writtenFirst + 2 * (s.writtenEnd - s.writtenFirst);
    dollars += s.requests * perRequest + rows * PRICE.row +
      s.writtenEnd * (PRICE.object + 2 * PRICE.row);
    requests += s.requests;
  }
  return dollars / requests;
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
const gated = await start("with `NEW_CALLERS` (shipped)", true);
const open = await start("without the binding", false);
const results = new Map<string, Spray[]>();
const returningOf = new Map<Served, number[]>();
const SHAPES: Shape[] = ["one", "two"];
try {
  let net = 0x6000;
  for (let r = 0; r < ROUNDS; r++) {
    // Alternating, each spray on a /48 of its own: each sees the budget of a fresh /48.
    for (const worker of r % 2 === 0 ? [gated, open] : [open, gated]) {
      for (const shape of SHAPES) {
        const key = `${shape} ${worker.label}`;
        results.set(key, [...results.get(key) ?? [], await sprayOnce(worker, net++, shape)]);
      }
    }
  }
  // Callers each Worker holds (sprayed twice: written by now), 5 passes: within the limit of 60.
  const held = [gated, open].map((w) => results.get(`two ${w.label}`)!.flatMap((s) => s.held));
  const count = Math.min(held[0]!.length, held[1]!.length, 20);
  const returningMs = await returning([gated, open], held, count, 5);
  returningOf.set(gated, returningMs[0]!).set(open, returningMs[1]!);
} finally {
  await gated.served.close();
  await open.served.close();
  await Deno.remove(gated.persist, { recursive: true });
  await Deno.remove(open.persist, { recursive: true });
}
console.log(
  `| ${CALLERS} new /64s of one /48 per spray, ${ROUNDS} rounds | requests | admitted | objects written at a first request | objects written in all | longest gap between a caller's requests | workerd CPU per request | $ per million sprayed requests (counted) |`,
);
console.log("|---|---:|---:|---:|---:|---:|---:|---:|");
for (const shape of SHAPES) {
  for (const worker of [gated, open]) {
    const sprays = results.get(`${shape} ${worker.label}`)!;
    const sum = (f: (s: Spray) => number) => sprays.reduce((a, s) => a + f(s), 0);
    const cpuUs = median(sprays.map((s) => s.cpuSeconds / s.requests * 1e6));
    console.log(
      `| ${shape === "one" ? "one request" : "two requests"} each, ${worker.label} | ${
        sum((s) => s.requests)
      } | ${sum((s) => s.admitted)} | ${sum((s) => s.writtenFirst)} | ${
        sum((s) => s.writtenEnd)
      } | ${
        shape === "one"
          ? ""
          : `${(Math.max(...sprays.map((s) => s.longestGapMs)) / 1000).toFixed(1)} s`
      } | ${cpuUs.toFixed(0)} µs | ${dollarsPerMillion(sprays, shape).toFixed(2)} |`,
    );
  }
}
for (const worker of [gated, open]) {
  console.log(
    `returning caller, ${worker.label}: median ${median(returningOf.get(worker)!).toFixed(2)} ms`,
  );
}
