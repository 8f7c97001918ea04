/**
 * The cold-start benchmark: from process spawn to the first 200, for the service as `deno task start`
 * runs it (the bundle that `deno task build` writes, `dist/app/main.js --listen`, built once first)
 * against a hello-world `Deno.serve` started the same way, on the same machine, in the same run.
 *
 * Run with `deno task bench:cold`. Options: `--runs 10` (pairs, at most 50), `--path
 * /api/v1/platform` (repeatable: each path is measured in its own pairs). Each run spawns a fresh
 * process on a free port of 127.0.0.1 and sends `GET <path>` (with `fetch`'s default
 * `Accept-Encoding: gzip, br`) every millisecond until one answers 200; the hello world answers every
 * path. The two processes of a pair start one after the other, alternating which goes first. The
 * report gives each side's median, the ratio of medians, and the median and spread (min-max) of the
 * per-pair ratios; only the ratios mean something on a shared machine. On Linux it also gives the
 * median per-pair ratio of CPU time (every thread of the process, from spawn to the first 200, read
 * from `/proc/<pid>/task/<tid>/schedstat`), which the other work on a shared machine disturbs less
 * than wall time.
 *
 * `--base <dir>` pairs this checkout with another one's `deno task start` (its bundle built first,
 * e.g. main's) instead of the hello world: the ratios are then this checkout's to that one's.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { join } from "node:path";
import { startTaskArgs, startTaskArgsOf } from "./_start_task.ts";

const ROOT = join(import.meta.dirname!, "..", "..");
/** Longest one process may take to answer 200 before the run is abandoned. */
const RUN_TIMEOUT_MS = 10_000;
/** Pause between two attempts while the process starts. */
const POLL_MS = 1;
const MAX_RUNS = 50;
const HELLO =
  `Deno.serve({ hostname: "127.0.0.1", port: Number(Deno.env.get("PORT")), onListen() {} },
  () => new Response("hello"));`;

/** Parsed command line. */
interface Options {
  runs: number;
  paths: string[];
  base: string | undefined;
}

function parseOptions(args: readonly string[]): Options {
  let runs = 10;
  let base: string | undefined;
  const paths: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const value = args[i + 1];
    if (args[i] === "--runs" && value !== undefined) {
      runs = Math.min(MAX_RUNS, Math.max(1, Number(value) || 1));
      i++;
    } else if (args[i] === "--path" && value !== undefined) {
      paths.push(value);
      i++;
    } else if (args[i] === "--base" && value !== undefined) {
      base = value;
      i++;
    } else if (args[i] !== "--") {
      // (`deno task bench:cold -- --runs 8` passes the `--` on: it is skipped.)
      throw new Error(`unknown argument ${args[i]}: use --runs N, --path /p, --base <dir>`);
    }
  }
  return { runs, paths: paths.length > 0 ? paths : ["/api/v1/platform"], base };
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  listener.close();
  return port;
}

/**
 * The CPU time in ms that process `pid` has used so far, all threads (Linux `schedstat`, in ns, read
 * by `cat`: Deno lets only `--allow-all` read `/proc`); undefined where it cannot be read.
 */
function cpuMs(pid: number): number | undefined {
  try {
    const { success, stdout } = new Deno.Command("sh", {
      args: ["-c", `cat /proc/${pid}/task/*/schedstat`],
      stderr: "null",
    }).outputSync();
    if (!success) return undefined;
    const lines = new TextDecoder().decode(stdout).trim().split("\n");
    return lines.reduce((sum, line) => sum + Number(line.split(" ")[0]), 0) / 1e6;
  } catch {
    return undefined;
  }
}

/** From spawn to the first 200: the wall time, and the CPU time the process used (where known). */
interface Start {
  ms: number;
  cpuMs: number | undefined;
}

/** Spawns `args` and measures it from spawn to the first 200 on `path`; then stops the process. */
async function timeToFirst200(
  args: string[],
  path: string,
  cwd: string = ROOT,
): Promise<Start> {
  const port = freePort();
  const url = `http://127.0.0.1:${port}${path}`;
  const started = performance.now();
  const child = new Deno.Command(Deno.execPath(), {
    args,
    cwd,
    env: {
      NO_COLOR: "1",
      PORT: String(port),
      HOSTNAME: "127.0.0.1",
      PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
    },
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    while (performance.now() - started < RUN_TIMEOUT_MS) {
      try {
        const response = await fetch(url);
        await response.body?.cancel();
        if (response.status === 200) {
          return { ms: performance.now() - started, cpuMs: cpuMs(child.pid) };
        }
        throw new Error(`${url} answered ${response.status}`);
      } catch (error) {
        if (!(error instanceof TypeError)) throw error;
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
    }
    throw new Error(`no 200 from ${url} within ${RUN_TIMEOUT_MS} ms`);
  } finally {
    child.kill("SIGKILL");
    await child.status;
  }
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
};

async function main(): Promise<void> {
  const options = parseOptions(Deno.args);
  const hello = join(Deno.makeTempDirSync(), "hello.ts");
  Deno.writeTextFileSync(hello, HELLO);
  // As `deno task start` runs it, from the project's folder (the child's working directory).
  const serviceArgs = startTaskArgs();
  const base = options.base;
  if (base !== undefined) {
    const built = await new Deno.Command(Deno.execPath(), { args: ["task", "build"], cwd: base })
      .output();
    if (!built.success) throw new Error(`deno task build failed in ${base}`);
  }
  const reference = base === undefined
    ? { name: "hello world", args: ["run", "--allow-net=127.0.0.1", "--allow-env=PORT", hello] }
    : { name: base, args: startTaskArgsOf(base), cwd: base };
  const timeReference = (path: string) => timeToFirst200(reference.args, path, reference.cwd);
  // One unmeasured run of each loads Deno's caches (compiled modules, V8 code cache).
  await timeReference("/");
  await timeToFirst200(serviceArgs, options.paths[0]!);
  console.log(
    `cold start: spawn to first 200, ${options.runs} pairs per path, Deno ${Deno.version.deno}`,
  );
  for (const path of options.paths) {
    const service: number[] = [];
    const bare: number[] = [];
    const ratios: number[] = [];
    const cpuRatios: number[] = [];
    for (let run = 0; run < options.runs; run++) {
      let s: Start, h: Start;
      if (run % 2 === 0) {
        s = await timeToFirst200(serviceArgs, path);
        h = await timeReference(path);
      } else {
        h = await timeReference(path);
        s = await timeToFirst200(serviceArgs, path);
      }
      service.push(s.ms);
      bare.push(h.ms);
      ratios.push(s.ms / h.ms);
      if (s.cpuMs !== undefined && h.cpuMs !== undefined) cpuRatios.push(s.cpuMs / h.cpuMs);
    }
    const f = (n: number) => n.toFixed(2);
    console.log(
      `GET ${path}: service median ${f(median(service))} ms, ${reference.name} median ${
        f(median(bare))
      } ms; ratio of medians ${f(median(service) / median(bare))}; per-pair ratio median ${
        f(median(ratios))
      } (min ${f(Math.min(...ratios))}, max ${f(Math.max(...ratios))})${
        cpuRatios.length === ratios.length
          ? `; per-pair CPU time ratio median ${f(median(cpuRatios))}`
          : ""
      }`,
    );
  }
}

if (import.meta.main) await main();
