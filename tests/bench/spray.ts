/**
 * The spray benchmark: what an operator must provision. The service (`main.ts --listen`, trusted
 * proxy mode, access log off) takes one request from each of 1,000,000 distinct IPv6 /64 callers
 * (`X-Forwarded-For`, sent by `wrk` with `spray.lua`), under several caps on tracked callers, and the
 * report gives the process's peak resident memory during the spray (VmHWM from /proc, which includes
 * V8's garbage between collections, not only the heap after a full GC) and wrk's latency.
 *
 * Usage: `deno task bench:spray [--callers 1000000] [--caps 500000,100000,2000000] [--runs 1]`.
 * The service is pinned to CPU 0 and wrk to CPU 1 (`taskset`), as in `load.ts`; only 127.0.0.1 is
 * targeted, and each wrk run stops after its callers or after 120 s.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { parseArgs } from "node:util";
import { startTaskArgs } from "./_start_task.ts";
import { freePort, status } from "./_proc.ts";

const { values: args } = parseArgs({
  args: Deno.args[0] === "--" ? Deno.args.slice(1) : Deno.args,
  options: {
    callers: { type: "string", default: "1000000" },
    caps: { type: "string", default: "500000,100000,2000000" },
    runs: { type: "string", default: "1" },
  },
});
const callers = Number(args.callers);
const runs = Number(args.runs);
if (!(callers >= 1000 && callers <= 5_000_000 && runs >= 1 && runs <= 5)) {
  throw new Error("--callers must be 1,000..5,000,000 and --runs 1..5");
}
const caps = args.caps.split(",").map(Number);
try {
  await new Deno.Command("wrk", { args: ["--version"], stdout: "null", stderr: "null" }).output();
} catch {
  throw new Error("wrk is missing: apt-get install wrk (deno task bench:load installs it)");
}
const here = import.meta.dirname!;
/** Upper bound of one spray, whatever the rate. */
const MAX_SECONDS = 120;
const THREADS = 2;

interface Result {
  cap: number;
  idleMiB: number;
  peakMiB: number;
  requests: number;
  p99: number;
  max: number;
  non2xx: number;
}

async function spray(cap: number): Promise<Result> {
  const port = freePort();
  const service = new Deno.Command("taskset", {
    args: [
      "-c",
      "0",
      Deno.execPath(),
      ...startTaskArgs(),
    ],
    cwd: `${here}/../..`,
    env: {
      HOSTNAME: "127.0.0.1",
      PORT: String(port),
      TRUSTED_PROXIES: "127.0.0.1",
      ACCESS_LOG: "false",
      PUBLIC_BASE_URL: "http://localhost:8000",
      RATE_LIMIT_MAX_CALLERS: String(cap),
    },
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    for (let i = 0;; i++) {
      try {
        await (await fetch(`http://127.0.0.1:${port}/llms.txt`)).body?.cancel();
        break;
      } catch (error) {
        if (i > 100) throw error;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const idle = await status(service.pid);
    const out = await new Deno.Command("taskset", {
      args: [
        "-c",
        "1",
        "wrk",
        `-t${THREADS}`,
        "-c50",
        `-d${MAX_SECONDS}s`,
        "--timeout",
        "2s",
        "-s",
        `${here}/spray.lua`,
        `http://127.0.0.1:${port}/api/v1/platform`,
        "--",
        String(callers),
        String(THREADS),
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    const line = text.split("\n").find((l) => l.startsWith("WRKJSON "));
    if (!line) throw new Error(`wrk failed: ${text}${new TextDecoder().decode(out.stderr)}`);
    const r = JSON.parse(line.slice(8));
    const after = await status(service.pid);
    return {
      cap,
      idleMiB: idle.rss,
      peakMiB: after.hwm,
      requests: r.requests,
      p99: r.p99_us / 1000,
      max: r.max_us / 1000,
      non2xx: r.non2xx3xx,
    };
  } finally {
    service.kill("SIGTERM");
    await service.status;
  }
}

console.log(
  `spray: ${callers.toLocaleString("en")} IPv6 /64 callers, one request each, caps ${
    caps.join(", ")
  }, ${runs} run(s); service on cpu 0, wrk -t${THREADS} -c50 on cpu 1`,
);
const rows = [
  "| run | RATE_LIMIT_MAX_CALLERS | requests | RSS idle | peak RSS (VmHWM) | p99 ms | max ms | p99 / p99 of the largest cap |",
  "|---|---|---|---|---|---|---|---|",
];
for (let run = 1; run <= runs; run++) {
  const results: Result[] = [];
  for (const cap of caps) {
    const result = await spray(cap);
    results.push(result);
    console.error(JSON.stringify(result));
  }
  const reference = results.reduce((a, b) => (b.cap > a.cap ? b : a));
  for (const r of results) {
    rows.push(
      `| ${run} | ${r.cap.toLocaleString("en")} | ${r.requests.toLocaleString("en")}${
        r.non2xx ? ` (${r.non2xx} not 2xx)` : ""
      } | ${r.idleMiB.toFixed(0)} MiB | ${r.peakMiB.toFixed(0)} MiB | ${r.p99.toFixed(2)} | ${
        r.max.toFixed(1)
      } | ${(r.p99 / reference.p99).toFixed(2)} |`,
    );
  }
}
console.log(rows.join("\n"));
