/**
 * The footprint benchmark: the memory of `deno task start` in this checkout and in others (`--base`,
 * e.g. main's), measured one after the other in interleaved rounds, as issue 40 measured it.
 *
 * Each round starts every checkout's own `deno task start` in turn (its bundle built first,
 * `ACCESS_LOG=false`, a `PUBLIC_BASE_URL` set as every real deployment sets it, the hot caller's
 * limit), pinned to one core, and reads from `/proc` of the service's process:
 *
 * - the RSS once it logs that it listens, before any request;
 * - the peak RSS (VmHWM) once the warm-up has logged that every representation is built;
 * - the RSS `--settle` seconds after that (default 3);
 * - the RSS after `--hot` seconds (default 5) of a hot caller (`wrk`, 10 connections, one caller,
 *   `GET /api/v1/platform`) on the other core, and the peak RSS then.
 *
 * With `--cgroup <dir>` (a cgroup v1 memory controller's folder, or a cgroup v2 folder, that this
 * user may create folders in, e.g. `/sys/fs/cgroup/memory/$(cut -d: -f3 ...)`), each start runs in a
 * memory cgroup of its own made there, and the peak charged to it (v1 `memory.max_usage_in_bytes`,
 * v2 `memory.peak`) is read after the warm-up and after the hot caller: what a container's memory
 * limit is held against. Pages of the `deno` binary that another process brought in are not charged
 * to it, so it is below the RSS.
 *
 * Usage:
 *   deno task bench:footprint -- [--rounds 3] [--settle 3] [--hot 5] [--cgroup <dir>] --base <dir>
 *
 * Only 127.0.0.1 is targeted; every run is bounded by `--hot` and a start-up timeout of 60 s.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { parseArgs } from "node:util";
import { HOT_CALLER_ENV } from "./_scenarios.ts";

const { values: args } = parseArgs({
  args: Deno.args[0] === "--" ? Deno.args.slice(1) : Deno.args,
  options: {
    rounds: { type: "string", default: "3" },
    settle: { type: "string", default: "3" },
    hot: { type: "string", default: "5" },
    base: { type: "string", multiple: true, default: [] },
    cgroup: { type: "string" },
    "server-cpu": { type: "string", default: "0" },
    "client-cpu": { type: "string", default: "1" },
  },
});
const rounds = Number(args.rounds);
const settle = Number(args.settle);
const hot = Number(args.hot);
if (!(rounds >= 1 && rounds <= 20 && settle >= 0 && settle <= 30 && hot >= 1 && hot <= 60)) {
  throw new Error("--rounds must be 1..20, --settle 0..30 and --hot 1..60 (seconds)");
}
const here = import.meta.dirname!;
const checkouts = [`${here}/../..`, ...args.base];

/** What one start of one checkout measured, in MiB. */
interface Footprint {
  rssListening: number;
  peakAfterWarmUp: number;
  rssSettled: number;
  rssAfterHot: number;
  peakAfterHot: number;
  warmUpMs: number;
  /** The peak charged to the start's own memory cgroup after the warm-up and after the hot caller. */
  cgroupAfterWarmUp?: number;
  cgroupAfterHot?: number;
}

/** A memory cgroup made for one start, under `--cgroup`. */
interface MemoryCgroup {
  dir: string;
  /** The file of the peak charged: v1 `memory.max_usage_in_bytes`, v2 `memory.peak`. */
  peakFile: string;
}

let cgroups = 0;

/**
 * Runs `command`: the cgroup's folder is made, read and removed by `mkdir`, `cat` and `rmdir`, since
 * Deno asks for --allow-all to touch /sys.
 */
function run(command: string, ...args: string[]): string {
  const out = new Deno.Command(command, { args, stdout: "piped", stderr: "piped" }).outputSync();
  if (!out.success) {
    throw new Error(`${command} ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
  }
  return new TextDecoder().decode(out.stdout);
}

/** Makes a memory cgroup of its own under `parent`. */
function makeCgroup(parent: string): MemoryCgroup {
  const dir = `${parent}/footprint-${Deno.pid}-${cgroups++}`;
  run("mkdir", dir);
  for (const peakFile of ["memory.max_usage_in_bytes", "memory.peak"]) {
    // Through `test`: Deno asks for --allow-all to read /sys, as /proc.
    const found = new Deno.Command("test", { args: ["-e", `${dir}/${peakFile}`] }).outputSync();
    if (found.success) return { dir, peakFile };
  }
  run("rmdir", dir);
  throw new Error(
    `${parent} is no memory cgroup folder (no memory.max_usage_in_bytes nor memory.peak)`,
  );
}

/** The peak charged to `cgroup`, MiB. */
function cgroupPeakMiB(cgroup: MemoryCgroup): number {
  return Number(run("cat", `${cgroup.dir}/${cgroup.peakFile}`).trim()) / 1024 / 1024;
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** A field of `/proc/<pid>/status` in MiB (`VmRSS`, `VmHWM`). */
async function statusMiB(pid: number, field: string): Promise<number> {
  // Through cat: Deno asks for --allow-all to read /proc/<pid> itself.
  const out = await new Deno.Command("cat", { args: [`/proc/${pid}/status`], stdout: "piped" })
    .output();
  const kb = new RegExp(`${field}:\\s+(\\d+) kB`).exec(new TextDecoder().decode(out.stdout))?.[1];
  if (kb === undefined) throw new Error(`no ${field} for process ${pid}`);
  return Number(kb) / 1024;
}

/** The text of a file under `/proc` ("" when it is gone). */
async function proc(path: string): Promise<string> {
  const out = await new Deno.Command("cat", { args: [path], stdout: "piped", stderr: "null" })
    .output();
  return new TextDecoder().decode(out.stdout);
}

/** The child process of `pid` that serves (`--listen`: not the entry picker the task runs first). */
async function serviceOf(pid: number): Promise<number> {
  for (let i = 0; i < 1200; i++) {
    for (const child of (await proc(`/proc/${pid}/task/${pid}/children`)).trim().split(/\s+/)) {
      if (child && (await proc(`/proc/${child}/cmdline`)).split("\0").includes("--listen")) {
        return Number(child);
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`deno task start (${pid}) started no service`);
}

/**
 * Whether `stream` says `text` before it ends (read on to its end either way, so that the service
 * never blocks on a full pipe).
 */
async function says(stream: ReadableStream<Uint8Array>, text: string): Promise<boolean> {
  let seen = "";
  let found = false;
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  const read = async (): Promise<void> => {
    while (true) {
      const { value, done } = await reader.read();
      if (done) return;
      seen = (seen + decoder.decode(value, { stream: true })).slice(-4096);
      if (!found && seen.includes(text)) {
        found = true;
        saidIt();
      }
    }
  };
  let saidIt = () => {};
  const said = new Promise<boolean>((resolve) => saidIt = () => resolve(true));
  return await Promise.race([said, read().then(() => found)]);
}

/** Starts `dir`'s `deno task start`, measures it, stops it. */
async function measure(dir: string): Promise<Footprint> {
  const port = freePort();
  const cgroup = args.cgroup === undefined ? undefined : makeCgroup(args.cgroup);
  const command = [
    "taskset",
    "-c",
    args["server-cpu"],
    Deno.execPath(),
    "task",
    "--quiet",
    "start",
  ];
  // In its cgroup from its first instruction: the shell moves itself there, then becomes the task.
  const task = new Deno.Command(cgroup ? "sh" : command[0]!, {
    args: cgroup
      ? ["-c", `echo $$ > '${cgroup.dir}/cgroup.procs' && exec "$@"`, "sh", ...command]
      : command.slice(1),
    cwd: dir,
    env: {
      ...HOT_CALLER_ENV,
      HOSTNAME: "127.0.0.1",
      PORT: String(port),
      ACCESS_LOG: "false",
      PUBLIC_BASE_URL: "https://discovery.example.com",
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const started = performance.now();
  try {
    const service = await serviceOf(task.pid);
    const timeout = AbortSignal.timeout(60_000);
    let rssListening = 0;
    const warmedUp = await new Promise<boolean>((resolve) => {
      timeout.addEventListener("abort", () => resolve(false));
      for (const stream of [task.stdout, task.stderr]) {
        const [forListening, forWarmUp] = stream.tee();
        void says(forListening, "listening").then(async (found) => {
          if (found) rssListening = await statusMiB(service, "VmRSS");
        });
        void says(forWarmUp, "warmed up").then((found) => found && resolve(true));
      }
    });
    if (!warmedUp) throw new Error(`${dir}: the service did not log its warm-up within 60 s`);
    const warmUpMs = performance.now() - started;
    const peakAfterWarmUp = await statusMiB(service, "VmHWM");
    const cgroupAfterWarmUp = cgroup && cgroupPeakMiB(cgroup);
    await new Promise((resolve) => setTimeout(resolve, settle * 1000));
    const rssSettled = await statusMiB(service, "VmRSS");
    const wrk = await new Deno.Command("taskset", {
      args: ["-c", args["client-cpu"], "wrk", "-t1", "-c10", `-d${hot}s`, "--timeout", "2s"]
        .concat([`http://127.0.0.1:${port}/api/v1/platform`]),
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!wrk.success) throw new Error(`wrk failed: ${new TextDecoder().decode(wrk.stderr)}`);
    const rssAfterHot = await statusMiB(service, "VmRSS");
    const peakAfterHot = await statusMiB(service, "VmHWM");
    const cgroupAfterHot = cgroup && cgroupPeakMiB(cgroup);
    return {
      rssListening,
      peakAfterWarmUp,
      rssSettled,
      rssAfterHot,
      peakAfterHot,
      warmUpMs,
      ...(cgroupAfterWarmUp !== undefined && cgroupAfterHot !== undefined
        ? { cgroupAfterWarmUp, cgroupAfterHot }
        : {}),
    };
  } finally {
    try {
      Deno.kill(await serviceOf(task.pid), "SIGTERM");
    } catch { /* already gone */ }
    await task.status;
    if (cgroup) run("rmdir", cgroup.dir);
  }
}

for (const dir of checkouts) {
  const built = await new Deno.Command(Deno.execPath(), { args: ["task", "build"], cwd: dir })
    .output();
  if (!built.success) throw new Error(`deno task build failed in ${dir}`);
}
const results = new Map<string, Footprint[]>(checkouts.map((dir) => [dir, []]));
for (let round = 0; round < rounds; round++) {
  // Rotate the order each round: no checkout always starts first.
  for (let i = 0; i < checkouts.length; i++) {
    const dir = checkouts[(i + round) % checkouts.length]!;
    results.get(dir)!.push(await measure(dir));
  }
  console.log(`round ${round + 1}/${rounds} done`);
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const cell = (xs: number[]) =>
  `${median(xs).toFixed(0)} [${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)}]`;
const rows: Array<[string, (f: Footprint) => number]> = [
  ["RSS once listening (before any request), MiB", (f) => f.rssListening],
  ["peak RSS (VmHWM) after start-up and warm-up, MiB", (f) => f.peakAfterWarmUp],
  [`RSS ${settle} s after warm-up, MiB`, (f) => f.rssSettled],
  [`RSS after ${hot} s of a hot caller (wrk, 10 connections), MiB`, (f) => f.rssAfterHot],
  ["peak RSS (VmHWM) after the hot caller, MiB", (f) => f.peakAfterHot],
  ["start to warmed up, ms", (f) => f.warmUpMs],
  ...(args.cgroup === undefined ? [] : [
    ["peak charged to its memory cgroup after the warm-up, MiB", (f) => f.cgroupAfterWarmUp!],
    ["peak charged to its memory cgroup after the hot caller, MiB", (f) => f.cgroupAfterHot!],
  ] satisfies Array<[string, (f: Footprint) => number]>),
];
console.log(`\nmedian [min–max] of ${rounds} starts each, one after the other\n`);
console.log(`| | ${checkouts.map((dir, i) => i === 0 ? "this checkout" : dir).join(" | ")} |`);
console.log(`|---|${checkouts.map(() => "--:").join("|")}|`);
for (const [name, of] of rows) {
  console.log(
    `| ${name} | ${checkouts.map((dir) => cell(results.get(dir)!.map(of))).join(" | ")} |`,
  );
}
