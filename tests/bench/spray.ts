/**
 * The spray benchmark: what an operator must provision. The service (as `deno task start` runs it,
 * trusted proxy mode, access log off) takes one request from each of 1,000,000 distinct IPv6 /64
 * callers (`X-Forwarded-For`, sent by `wrk` with `spray.lua`), once per store and mode, and the
 * report gives wrk's requests per second and latency, the process's peak resident memory (VmHWM from
 * /proc, which includes V8's garbage between collections, not only the heap after a full GC) at
 * start-up (to the end of the warm-up, whose tokenizer worker peaks then) and from the spray's start
 * to the end of `--after` (VmHWM reset in between), its RSS idle before the spray, and its RSS
 * `--after` seconds after the spray ended (default 20).
 *
 * Usage: `deno task bench:spray [--callers 1000000] [--runs 1] [--caps 500000]
 * [--stores memory,redis-exact,redis-local-first,kv-exact,kv-local-first,sqlite-local-first]
 * [--after 20]
 * [--seconds 120] [--v8=<flags>] [--log <folder> [--trace-gc] [--heap <seconds>]]`.
 *
 * - `redis-*` start a throwaway `redis-server` on a free port of 127.0.0.1 for each row (no
 *   persistence), stopped after it; `kv-*` open a KV file, `sqlite-*` the SQLite hit log's file,
 *   in a temporary folder of their own (the service is granted read and write there only), removed
 *   after the row.
 * - Each row runs in a fresh service process and a fresh store, so rows do not share state.
 * - `--caps` runs each store under several `RATE_LIMIT_MAX_CALLERS`; the default is the default cap.
 * - `--v8` adds V8 flags (comma-separated) after the task's `--v8-flags`, which they override.
 * - `--log` writes each service's stdout and stderr to `<folder>/<store>-<cap>-<run>.log`;
 *   `--trace-gc` adds V8's line per collection to it and `--heap <seconds>` the heap probe's
 *   (`_heap_probe.ts`, preloaded) every so many seconds.
 *
 * The service is pinned to CPU 0 and wrk to CPU 1 (`taskset`), as in `load.ts`; Redis is not pinned.
 * Only 127.0.0.1 is targeted; each wrk run stops after its callers or after `--seconds` (a store too
 * slow for a million callers in that time sprays fewer: the requests column says how many).
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { parseArgs } from "node:util";
import { startTaskArgs } from "./_start_task.ts";
import { freePort, status } from "./_proc.ts";
import { startRedis, type TestRedis } from "../_redis.ts";

/** The stores and modes the spray can run, in the order of the table. */
const STORES = [
  "memory",
  "redis-exact",
  "redis-local-first",
  "kv-exact",
  "kv-local-first",
  "sqlite-local-first",
];

const { values: args } = parseArgs({
  args: Deno.args[0] === "--" ? Deno.args.slice(1) : Deno.args,
  options: {
    callers: { type: "string", default: "1000000" },
    caps: { type: "string", default: "500000" },
    stores: { type: "string", default: STORES.join(",") },
    runs: { type: "string", default: "1" },
    after: { type: "string", default: "20" },
    seconds: { type: "string", default: "120" },
    log: { type: "string" },
    "trace-gc": { type: "boolean", default: false },
    heap: { type: "string" },
    v8: { type: "string" },
  },
});
const callers = Number(args.callers);
const runs = Number(args.runs);
const afterSeconds = Number(args.after);
const maxSeconds = Number(args.seconds);
if (!(callers >= 1000 && callers <= 5_000_000 && runs >= 1 && runs <= 5)) {
  throw new Error("--callers must be 1,000..5,000,000 and --runs 1..5");
}
if (!(afterSeconds >= 0 && afterSeconds <= 300 && maxSeconds >= 1 && maxSeconds <= 600)) {
  throw new Error("--after must be 0..300 seconds and --seconds 1..600");
}
const caps = args.caps.split(",").map(Number);
if (!caps.every((cap) => Number.isInteger(cap) && cap >= 1)) {
  throw new Error("--caps must be positive integers, comma-separated");
}
const stores = args.stores.split(",").map((s) => s.trim());
for (const store of stores) {
  if (!STORES.includes(store)) throw new Error(`--stores: ${store} is not one of ${STORES}`);
}
if ((args["trace-gc"] || args.heap !== undefined) && args.log === undefined) {
  throw new Error("--trace-gc and --heap write into the --log folder: give it");
}
try {
  await new Deno.Command("wrk", { args: ["--version"], stdout: "null", stderr: "null" }).output();
} catch {
  throw new Error("wrk is missing: apt-get install wrk (deno task bench:load installs it)");
}
const here = import.meta.dirname!;
const THREADS = 2;
/** How long the service is left idle after its first answer, for its warm-up to end. */
const WARM_UP_SECONDS = 5;

/** What is running now, stopped on Ctrl-C as after each row. */
const cleanups = new Set<() => Promise<void>>();
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(signal, async () => {
    for (const cleanup of [...cleanups].reverse()) await cleanup().catch(() => {});
    Deno.exit(130);
  });
}

/** Runs `cleanup` at the end of `body`, and on Ctrl-C while it runs. */
async function using<T>(cleanup: () => Promise<void>, body: () => Promise<T>): Promise<T> {
  cleanups.add(cleanup);
  try {
    return await body();
  } finally {
    cleanups.delete(cleanup);
    await cleanup();
  }
}

interface Result {
  store: string;
  cap: number;
  run: number;
  idleMiB: number;
  startPeakMiB: number;
  peakMiB: number;
  afterMiB: number;
  requests: number;
  seconds: number;
  p99: number;
  max: number;
  non2xx: number;
  errors: number;
  /** `local-first`: the hits the store's hit log holds a second after the spray (else undefined). */
  held: number | undefined;
}

/**
 * The hits the shared hit log of `local-first` holds now (KV: read as a process that starts reads
 * them, a first exchange; Redis: the stream): what "nothing lost" compares with the requests
 * admitted.
 */
async function heldHits(env: Record<string, string>): Promise<number | undefined> {
  if (env.RATE_LIMIT_CONSISTENCY !== "local-first") return undefined;
  const { decodeHits } = await import("../../lib/limit/local_first/hit_codec.ts");
  if (env.RATE_LIMIT_STORE === "redis") {
    // redis-cli rather than the service's client, which reads environment variables this bench
    // may not: the stream's `h` fields, one per line.
    const out = await new Deno.Command("redis-cli", {
      args: ["-u", env.REDIS_URL!, "--raw", "XRANGE", "rate_limit:{hitlog}", "-", "+"],
      stdout: "piped",
    }).output();
    const lines = new TextDecoder().decode(out.stdout).split("\n");
    let held = 0;
    for (let i = 0; i + 1 < lines.length; i++) {
      if (lines[i] !== "h") continue;
      decodeHits(Uint8Array.fromBase64(lines[++i]!), () => held++);
    }
    return held;
  }
  if (env.RATE_LIMIT_STORE === "sqlite") {
    const { SqliteHitLog } = await import("../../lib/limit/sqlite/sqlite_hit_log.ts");
    const log = SqliteHitLog.open(env.SQLITE_PATH!, 60_000, { instance: "spray-counter" });
    try {
      let held = 0;
      do {
        for (const batch of await log.exchange(null)) decodeHits(batch.hits, () => held++);
      } while (log.more);
      return held;
    } finally {
      log.close();
    }
  }
  const { KvHitLog } = await import("../../lib/limit/kv/kv_hit_log.ts");
  const kv = await Deno.openKv(env.KV_PATH!);
  const log = new KvHitLog(kv, 60_000, { instance: "spray-counter", ownsKv: true });
  try {
    let held = 0;
    for (const batch of await log.exchange(null)) decodeHits(batch.hits, () => held++);
    return held;
  } finally {
    await log.close();
  }
}

/** The store's environment and its extra `deno run` permissions, for the duration of `body`. */
async function withStore<T>(
  store: string,
  body: (env: Record<string, string>, permit: (argv: string[]) => string[]) => Promise<T>,
): Promise<T> {
  const [kind, ...mode] = store.split("-");
  const consistency = mode.join("-");
  if (kind === "memory") return await body({ RATE_LIMIT_STORE: "memory" }, (argv) => argv);
  if (kind === "redis") {
    let redis: TestRedis | undefined;
    return await using(async () => await redis?.stop(), async () => {
      redis = await startRedis();
      return await body({
        RATE_LIMIT_STORE: "redis",
        REDIS_URL: redis.url,
        RATE_LIMIT_CONSISTENCY: consistency,
      }, (argv) => argv);
    });
  }
  const dir = await Deno.makeTempDir({ prefix: "spray-kv-" });
  return await using(
    () => Deno.remove(dir, { recursive: true }).catch(() => {}),
    async () =>
      await body(
        {
          ...(kind === "sqlite"
            ? { RATE_LIMIT_STORE: "sqlite", SQLITE_PATH: `${dir}/hits.sqlite3` }
            : { RATE_LIMIT_STORE: "kv", KV_PATH: `${dir}/limits.sqlite` }),
          RATE_LIMIT_CONSISTENCY: consistency,
        },
        // The task's read permission plus the folder, and write there only (as `start:kv` grants).
        (argv) => {
          const out = argv.map((word) =>
            word.startsWith("--allow-read=") ? `${word},${dir}` : word
          );
          const at = out.findIndex((word) => word.startsWith("--allow-read"));
          out.splice(at + 1, 0, `--allow-write=${dir}`);
          return out;
        },
      ),
  );
}

/** The service as `deno task start` runs it, `--trace-gc` and the heap probe added if asked for. */
function serviceArgs(): string[] {
  const argv = startTaskArgs();
  const at = argv.findIndex((word) => word.startsWith("--v8-flags="));
  if (args.v8 !== undefined) argv[at] = `${argv[at]},${args.v8}`;
  if (args["trace-gc"]) argv[at] = `${argv[at]},--trace-gc`;
  if (args.heap !== undefined) argv.splice(at, 0, `--preload=${here}/_heap_probe.ts`);
  return argv;
}

/**
 * One wrk run over the callers: its summary, and the seconds from its start until every thread had
 * its share answered (wrk's own duration is always `-d`, since its main thread sleeps it out).
 */
async function sprayWith(port: number) {
  const started = performance.now();
  const wrk = new Deno.Command("taskset", {
    args: [
      ...["-c", "1", "wrk", `-t${THREADS}`, "-c50", `-d${maxSeconds}s`, "--timeout", "2s"],
      ...["-s", `${here}/spray.lua`, `http://127.0.0.1:${port}/api/v1/platform`, "--"],
      ...[String(callers), String(THREADS)],
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stopWrk = async () => {
    try {
      wrk.kill("SIGKILL");
    } catch {
      // Exited.
    }
    await wrk.status;
  };
  return await using(stopWrk, async () => {
    const stderr = new Response(wrk.stderr).text();
    let text = "";
    let stopped = 0;
    let seconds = maxSeconds;
    for await (const chunk of wrk.stdout.pipeThrough(new TextDecoderStream())) {
      text += chunk;
      const count = text.split("\n").filter((line) => line === "WRKSTOP").length;
      if (count > stopped && count >= THREADS && stopped < THREADS) {
        seconds = (performance.now() - started) / 1000;
        // SIGINT ends wrk's sleep: it joins the threads and prints the summary.
        wrk.kill("SIGINT");
      }
      stopped = count;
    }
    const line = text.split("\n").find((l) => l.startsWith("WRKJSON "));
    if (!line) throw new Error(`wrk failed: ${text}${await stderr}`);
    return { ...JSON.parse(line.slice(8)), seconds };
  });
}

async function spray(store: string, cap: number, run: number): Promise<Result> {
  return await withStore(store, async (storeEnv, permit) => {
    const port = freePort();
    const logFile = args.log === undefined
      ? undefined
      : await Deno.open(`${args.log}/${store}-${cap}-${run}.log`, {
        write: true,
        create: true,
        truncate: true,
      });
    const service = new Deno.Command("taskset", {
      args: ["-c", "0", Deno.execPath(), ...permit(serviceArgs())],
      cwd: `${here}/../..`,
      env: {
        HOSTNAME: "127.0.0.1",
        PORT: String(port),
        TRUSTED_PROXIES: "127.0.0.1",
        ACCESS_LOG: "false",
        PUBLIC_BASE_URL: "http://localhost:8000",
        RATE_LIMIT_MAX_CALLERS: String(cap),
        ...(args.heap === undefined ? {} : { HEAP_PROBE_SECONDS: args.heap }),
        ...storeEnv,
      },
      stdout: logFile ? "piped" : "null",
      stderr: logFile ? "piped" : "null",
    }).spawn();
    const copied = logFile
      ? Promise.all([service.stdout, service.stderr].map(async (stream) => {
        for await (const chunk of stream) await logFile.write(chunk);
      }))
      : Promise.resolve();
    const stop = async () => {
      try {
        service.kill("SIGTERM");
      } catch {
        // Already exited.
      }
      const timer = setTimeout(() => {
        try {
          service.kill("SIGKILL");
        } catch {
          // Exited meanwhile.
        }
      }, 10_000);
      await service.status;
      clearTimeout(timer);
      await copied.catch(() => {});
      logFile?.close();
    };
    return await using(stop, async () => {
      for (let i = 0;; i++) {
        try {
          await (await fetch(`http://127.0.0.1:${port}/llms.txt`)).body?.cancel();
          break;
        } catch (error) {
          if (i > 200) throw error;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      // The warm-up (0.5 s after start) builds every body and counts the Markdown's tokens in a
      // worker: its peak is the start-up's, apart from the spray's. Linux resets VmHWM to the
      // current RSS on "5" written to clear_refs (through sh: Deno asks for --allow-all to write
      // /proc itself).
      await new Promise((resolve) => setTimeout(resolve, WARM_UP_SECONDS * 1000));
      const idle = await status(service.pid);
      await new Deno.Command("sh", {
        args: ["-c", `echo 5 > /proc/${service.pid}/clear_refs`],
      }).output();
      const r = await sprayWith(port);
      // One second: the service's last exchanges (every RATE_LIMIT_SYNC_MS) have landed.
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const held = await heldHits(storeEnv);
      await new Promise((resolve) => setTimeout(resolve, afterSeconds * 1000));
      const after = await status(service.pid);
      return {
        store,
        cap,
        run,
        idleMiB: idle.rss,
        startPeakMiB: idle.hwm,
        peakMiB: after.hwm,
        afterMiB: after.rss,
        requests: r.requests,
        seconds: r.seconds,
        p99: r.p99_us / 1000,
        max: r.max_us / 1000,
        non2xx: r.non2xx3xx,
        errors: r.errors,
        held,
      };
    });
  });
}

const LABELS: Record<string, string> = {
  "memory": "memory",
  "redis-exact": "Redis, exact",
  "redis-local-first": "Redis, local-first",
  "kv-exact": "Deno KV, exact",
  "kv-local-first": "Deno KV, local-first",
  "sqlite-local-first": "SQLite hit log (node:sqlite), local-first",
};

console.log(
  `spray: ${callers.toLocaleString("en")} IPv6 /64 callers, one request each, stores ${
    stores.join(", ")
  }, caps ${
    caps.join(", ")
  }, ${runs} run(s), RSS ${afterSeconds} s after; service on cpu 0, wrk -t${THREADS} -c50 on cpu 1 (at most ${maxSeconds} s a row)`,
);
const rows = [
  `| run | store, mode | RATE_LIMIT_MAX_CALLERS | requests | req/s | p99 | max | peak RSS at start-up | RSS idle | peak RSS, spray | RSS ${afterSeconds} s after |`,
  "|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
];
for (let run = 1; run <= runs; run++) {
  for (const store of stores) {
    for (const cap of caps) {
      const r = await spray(store, cap, run);
      console.error(JSON.stringify(r));
      const notes = [
        r.non2xx ? `${r.non2xx.toLocaleString("en")} not 2xx` : "",
        r.errors ? `${r.errors.toLocaleString("en")} socket errors` : "",
        r.requests < callers ? `stopped at ${maxSeconds} s` : "",
        r.held === undefined
          ? ""
          : `store holds ${r.held.toLocaleString("en")} of ${
            (r.requests - r.non2xx).toLocaleString("en")
          } admitted`,
      ].filter((note) => note !== "");
      rows.push(
        `| ${run} | ${LABELS[store]} | ${r.cap.toLocaleString("en")} | ${
          r.requests.toLocaleString("en")
        }${notes.length ? ` (${notes.join(", ")})` : ""} | ${
          Math.round(r.requests / r.seconds).toLocaleString("en")
        } | ${r.p99.toFixed(1)} ms | ${r.max.toFixed(0)} ms | ${r.startPeakMiB.toFixed(0)} MiB | ${
          r.idleMiB.toFixed(0)
        } MiB | ${r.peakMiB.toFixed(0)} MiB | ${r.afterMiB.toFixed(0)} MiB |`,
      );
      console.log(rows.at(-1));
    }
  }
}
console.log(`\n${rows.join("\n")}`);
