/**
 * The memory store in a Worker isolate (`RATE_LIMIT_STORE=memory` on workerd), sprayed: the
 * isolate's heap and array buffers as V8's inspector reports them (`Runtime.getHeapUsage` through
 * workerd's inspector), with the Worker warmed, after one request each from `--callers` new callers
 * (by default the store's cap on Workers), and after `--full` new callers each using its whole limit
 * of 60 (the costliest log), to be set against an isolate's 128 MB (lib/limit/README.md, "Durable
 * Objects on Workers"). workerd's resident memory is printed beside it but says little: it grows by
 * hundreds of MiB with requests whatever the store holds (local workerd enforces no isolate limit).
 *
 * Run: `deno task bench:worker-spray` (about 3 minutes). Bounded: `--callers` at most the store's
 * cap on Workers (`lib/workers/memory_cap.ts`), `--full` at most 5,000, 16 requests at a time, to
 * 127.0.0.1 only.
 *
 * @module
 */
// deno-lint-ignore-file no-console -- a benchmark's report

import { parseArgs } from "node:util";
import { buildWorker } from "../../lib/build/worker.ts";
import { serveWorker } from "../../lib/build/worker_dev.ts";
import { workersMaxCallers } from "../../lib/workers/memory_cap.ts";
import { ROOT } from "../_deno_info.ts";
import { freePort, status } from "./_proc.ts";

const CAP = workersMaxCallers(60);
const { values } = parseArgs({
  args: Deno.args,
  options: { callers: { type: "string", default: String(CAP) }, full: { type: "string" } },
});
const CALLERS = Math.min(CAP, Math.max(1, Number(values.callers)));
const FULL = Math.min(5_000, Math.max(1, Number(values.full ?? "1000")));
const CONCURRENCY = 16;

/** The workerd process among this process's children. */
async function workerdPid(): Promise<number> {
  const out = await new Deno.Command("pgrep", { args: ["-P", String(Deno.pid), "workerd"] })
    .output();
  return Number(new TextDecoder().decode(out.stdout).trim().split("\n")[0]);
}

/** The IPv4 address of caller `n` (10.0.0.0/8: distinct callers, one key each). */
function addressOf(n: number): string {
  return `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
}

/** Sends `count` requests, request `i` from caller `callerOf(i)`, `CONCURRENCY` at a time. */
async function spray(url: URL, count: number, callerOf: (i: number) => number): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < count) {
      const i = next++;
      const response = await fetch(url, {
        headers: { "cf-connecting-ip": addressOf(callerOf(i)) },
      });
      await response.arrayBuffer();
      if (response.status !== 200 && response.status !== 429) {
        throw new Error(`request ${i}: ${response.status}`);
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, lane));
}

const MIB = 1024 * 1024;

/** The isolate's heap as V8's inspector reports it (`Runtime.getHeapUsage`), in bytes. */
interface HeapUsage {
  usedSize: number;
  totalSize: number;
  backingStorageSize: number;
}

/** A V8 inspector session on the Worker's isolate (workerd's inspector, target `core:user:discovery`). */
async function inspect(port: number): Promise<{ heap(): Promise<HeapUsage>; close(): void }> {
  const socket = new WebSocket(`ws://127.0.0.1:${port}/core:user:discovery`);
  await new Promise((resolve, reject) => {
    socket.onopen = resolve;
    socket.onerror = reject;
  });
  const pending = new Map<number, (result: unknown) => void>();
  socket.onmessage = (event) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown };
    if (message.id !== undefined) pending.get(message.id)?.(message.result);
  };
  let id = 0;
  const call = (method: string) =>
    new Promise<unknown>((resolve) => {
      pending.set(++id, resolve);
      socket.send(JSON.stringify({ id, method, params: {} }));
    });
  await call("Runtime.enable");
  return {
    heap: () => call("Runtime.getHeapUsage") as Promise<HeapUsage>,
    close: () => socket.close(),
  };
}

await buildWorker(ROOT);
const inspectorPort = freePort();
const served = await serveWorker({
  root: ROOT,
  port: 0,
  persist: false,
  bindings: {
    PUBLIC_BASE_URL: "http://127.0.0.1",
    RATE_LIMIT_STORE: "memory",
    ACCESS_LOG: "false",
  },
  inspectorPort,
});
try {
  const pid = await workerdPid();
  const platform = new URL("/api/v1/platform", served.url);
  for (const path of ["/api/v1/platform", "/", "/llms.txt", "/openapi.json", "/developers"]) {
    await (await fetch(new URL(path, served.url))).arrayBuffer();
  }
  const session = await inspect(inspectorPort);
  const rows: string[] = [];
  const mib = (bytes: number) => `${(bytes / MIB).toFixed(1)} MiB`;
  // No GC can be forced through workerd's inspector (HeapProfiler.collectGarbage does not answer):
  // the live size is the least seen over 20 samples while 10,000 more requests of one caller run,
  // whose garbage (their bodies are array buffers too) brings collections about.
  const settled = async (): Promise<HeapUsage> => {
    let least: HeapUsage | undefined;
    for (let i = 0; i < 20; i++) {
      await spray(platform, 500, () => 0);
      const heap = await session.heap();
      least = least === undefined ? heap : {
        usedSize: Math.min(least.usedSize, heap.usedSize),
        totalSize: Math.min(least.totalSize, heap.totalSize),
        backingStorageSize: Math.min(least.backingStorageSize, heap.backingStorageSize),
      };
    }
    return least!;
  };
  const row = async (label: string) => {
    const heap = await settled();
    rows.push(
      `| ${label} | ${mib(heap.usedSize)} | ${mib(heap.totalSize)} | ${
        mib(heap.backingStorageSize)
      } | ${mib(heap.usedSize + heap.backingStorageSize)} | ${
        (await status(pid)).rss.toFixed(0)
      } MiB |`,
    );
    return heap;
  };
  const warm = await row("warmed (every path built)");
  await spray(platform, CALLERS, (i) => i);
  const sprayed = await row(`+ ${CALLERS} new callers, one request each`);
  await spray(platform, FULL * 60, (i) => CALLERS + Math.floor(i / 60));
  const full = await row(`+ ${FULL} new callers, 60 requests each`);
  session.close();
  const isolate = (heap: HeapUsage) => heap.usedSize + heap.backingStorageSize;
  const perFull = (isolate(full) - isolate(sprayed)) / FULL;
  console.log(
    `| workerd, memory store, limit 60, cap ${CAP} (least of 20 samples) | heap used | heap total | array buffers | used + buffers | workerd RSS |`,
  );
  console.log(`|---|---|---|---|---|---|`);
  for (const line of rows) console.log(line);
  console.log(
    `\nper new caller, one request: ${
      ((isolate(sprayed) - isolate(warm)) / CALLERS).toFixed(0)
    } B of heap used + buffers; per caller with a full log: ${
      perFull.toFixed(0)
    } B; the cap at full logs: ${mib(isolate(warm) + CAP * perFull)} projected`,
  );
} finally {
  await served.close();
}
