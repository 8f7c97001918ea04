/**
 * The memory benchmark: resident memory and V8 heap before and after 100,000 and 1,000,000 distinct
 * callers with one request each, per tracked caller, and what happens at the tracked-caller cap.
 *
 * Run with `deno task bench:memory`. Every case runs in a fresh process (so that no case sees another's
 * garbage) with `--v8-flags=--expose-gc`, so that every figure is taken after a full collection;
 * "heap" is V8's heap plus its external memory (array buffers: the caller table's typed arrays).
 * The key strings are made by the benchmark as a server makes them from each request. The spray
 * cases also give the peak RSS (VmHWM) with no collection forced, and the pause cases the longest
 * single call at 500,000 callers.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { createHandler } from "../../lib/handler.ts";
import { loadConfig } from "../../lib/config/config.ts";
import { recordEnv } from "../../lib/config/env.ts";
import { loadContent } from "../../lib/pages/content.ts";
import { MemoryStore, SWEEP_INTERVAL_MS } from "../../lib/limit/memory/memory_store.ts";
import { DISK_STATIC_FILES } from "../../lib/server/static_files.ts";

const gc = (globalThis as { gc?: () => void }).gc;

const POLICY = { limit: 60, windowMs: 60_000 };
/**
 * Where the store before its caller table moved its base time (2^30 ms after its first call); the
 * pause cases cross it, so that the same benchmark measures both stores.
 */
const FORMER_BASE_MOVE_MS = 2 ** 30;
const T0 = Date.now();

function measure(): { rss: number; heap: number } {
  if (!gc) throw new Error("a case runs with --v8-flags=--expose-gc (deno task bench:memory)");
  for (let i = 0; i < 3; i++) gc();
  const m = Deno.memoryUsage();
  // Typed arrays (the caller table) are outside V8's heap: `external` counts them.
  return { rss: m.rss, heap: m.heapUsed + m.external };
}

/** Caller `n` as an address string, made fresh (as a server makes it from a request). */
function address(n: number): string {
  return `10.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

/** Caller `n` as the key of an IPv6 /64 (`keyOfIp` writes four full hextets): kept as a string. */
function network(n: number): string {
  const hex = (v: number) => v.toString(16).padStart(4, "0");
  return `2001:0db8:${hex((n >>> 16) & 0xffff)}:${hex(n & 0xffff)}::/64`;
}

const mb = (bytes: number) => `${(bytes / 1048576).toFixed(1)} MB`;

interface Row {
  name: string;
  sent: number;
  tracked: number;
  before: { rss: number; heap: number };
  after: { rss: number; heap: number };
  ms: number;
  note?: string;
}

type Case = () => Promise<Row[]> | Row[];

function storeCase(n: number, key = address, kind = ""): Case {
  return () => {
    const before = measure();
    // Capped at exactly the callers sent: nothing is evicted, and the caller table (sized from
    // the cap) is no larger than it must be.
    const store = new MemoryStore(POLICY, { sweep: false, maxCallers: n });
    let started = performance.now();
    for (let i = 0; i < n; i++) store.hit(key(i), T0 + (i >> 10));
    const ms = performance.now() - started;
    const after = measure();
    const tracked = store.stats().tracked;
    const one = {
      name: `MemoryStore${kind}, one request each`,
      sent: n,
      tracked,
      before,
      after,
      ms,
    };
    // A second request each: every caller's sliding log now holds two timestamps.
    started = performance.now();
    for (let i = 0; i < n; i++) store.hit(key(i), T0 + 1000 + (i >> 10));
    const ms2 = performance.now() - started;
    const after2 = measure();
    store.close();
    return [one, {
      name: `MemoryStore${kind}, two requests each`,
      sent: n,
      tracked,
      before,
      after: after2,
      ms: ms2,
    }];
  };
}

/** A call longer than this is a pause (the issue's target at 500,000 callers). */
const PAUSE_MS = 10;

/**
 * Pauses: 500,000 callers tracked (the default cap), then 90 s of traffic on the store's own clock
 * that crosses {@linkcode FORMER_BASE_MOVE_MS}, with the sweep every 100 ms as its timer runs it.
 * The longest single call of each kind is the longest pause the store causes (a garbage
 * collection that falls in a call is counted in it).
 */
function pausesCase(callerKey: (n: number) => string, kind: string): Case {
  return () => {
    const tracked = 500_000;
    const before = measure();
    const store = new MemoryStore(POLICY, { sweep: false });
    store.hit("192.0.2.1", T0); // sets the base time
    const start = T0 + FORMER_BASE_MOVE_MS - 30_000;
    for (let i = 0; i < tracked - 1; i++) store.hit(callerKey(i), start - 20_000 + (i >> 6));
    let longestHit = 0;
    let longestSweep = 0;
    let sent = 0;
    // The same timing around a trivial call, in the same loop: what the machine alone causes
    // (preemption on shared cores, the benchmark's own garbage).
    const reference = new Map(Array.from({ length: 1024 }, (_, i) => [i, i]));
    let longestReference = 0;
    let slowHits = 0;
    let slowReferences = 0;
    const started = performance.now();
    for (let now = start; now < start + 90_000; now += SWEEP_INTERVAL_MS) {
      // 1,000 requests per 100 ms of the store's clock, a third from callers it tracks.
      for (let i = 0; i < 1_000; i++, sent++) {
        const key = i % 3 === 0 ? callerKey((sent * 7919) % tracked) : callerKey(tracked + sent);
        const t0 = performance.now();
        store.hit(key, now + (i % SWEEP_INTERVAL_MS));
        const t1 = performance.now();
        reference.get(i & 1023);
        const t2 = performance.now();
        longestHit = Math.max(longestHit, t1 - t0);
        longestReference = Math.max(longestReference, t2 - t1);
        if (t1 - t0 > PAUSE_MS) slowHits++;
        if (t2 - t1 > PAUSE_MS) slowReferences++;
      }
      const t0 = performance.now();
      store.sweep(now + SWEEP_INTERVAL_MS);
      longestSweep = Math.max(longestSweep, performance.now() - t0);
    }
    const ms = performance.now() - started;
    const after = measure();
    const stats = store.stats();
    store.close();
    return [{
      name:
        `MemoryStore at 500,000 ${kind} callers, 90 s across 2^30 ms (a former move of the base)`,
      sent,
      tracked: stats.tracked,
      before,
      after,
      ms,
      note: `longest hit ${
        longestHit.toFixed(1)
      } ms (${slowHits} over ${PAUSE_MS} ms), longest sweep pass ${
        longestSweep.toFixed(1)
      } ms; reference call: longest ${
        longestReference.toFixed(1)
      } ms (${slowReferences} over ${PAUSE_MS} ms); evicted ${stats.evicted.toLocaleString("en")}`,
    }];
  };
}

/** Peak resident memory of this process so far (VmHWM), in bytes. */
function peakRss(): number {
  // Through cat: Deno asks for --allow-all to read /proc itself.
  const out = new Deno.Command("cat", { args: [`/proc/${Deno.pid}/status`] }).outputSync();
  const status = new TextDecoder().decode(out.stdout);
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1]) * 1024;
}

/**
 * The store alone through `bench:spray`'s traffic: 1,000,000 IPv6 /64 callers with one request each,
 * their key strings made per request as the service makes them, 60 s of the store's clock with the
 * sweep every 100 ms, no collection forced during it. Gives what the store adds to the service's
 * peak (VmHWM over the RSS before, both counting the benchmark's own key garbage) and its heap
 * after a full collection, and how often a call took over 1 ms.
 */
function sprayCase(cap: number): Case {
  return () => {
    const sent = 1_000_000;
    const before = measure();
    const store = new MemoryStore(POLICY, { sweep: false, maxCallers: cap });
    const perSweep = sent / (60_000 / SWEEP_INTERVAL_MS);
    let longest = 0;
    let slow = 0;
    const started = performance.now();
    for (let i = 0; i < sent; i++) {
      const now = T0 + i * (60_000 / sent);
      const t0 = performance.now();
      store.hit(network(i), now);
      if (i % perSweep === perSweep - 1) store.sweep(now);
      const took = performance.now() - t0;
      if (took > longest) longest = took;
      if (took > 1) slow++;
    }
    const ms = performance.now() - started;
    const after = measure();
    const peak = peakRss();
    const { tracked, evicted } = store.stats();
    store.close();
    return [{
      name: `MemoryStore alone, spray of 1,000,000 IPv6 /64 callers, cap ${
        cap.toLocaleString("en")
      }`,
      sent,
      tracked,
      before,
      after,
      ms,
      note: `peak RSS ${mb(peak)} (${mb(peak - before.rss)} over the RSS before); longest call ${
        longest.toFixed(1)
      } ms, ${slow} over 1 ms; evicted ${evicted.toLocaleString("en")}`,
    }];
  };
}

const CASES: Record<string, Case> = {
  "store-100k": storeCase(100_000),
  "store-1m": storeCase(1_000_000),
  // IPv6 callers are keyed by their /64 as a string: the store keeps the string.
  "store-1m-ipv6": storeCase(1_000_000, network, " (IPv6 /64 keys)"),
  // The most a caller can hold: 10,000 callers with `limit` (60) requests each in the window.
  "store-full": () => {
    const before = measure();
    const callers = 10_000;
    const store = new MemoryStore(POLICY, { sweep: false, maxCallers: callers });
    const started = performance.now();
    for (let r = 0; r < POLICY.limit; r++) {
      for (let i = 0; i < callers; i++) store.hit(address(i), T0 + r * 100);
    }
    const ms = performance.now() - started;
    const after = measure();
    const tracked = store.stats().tracked;
    const refused = store.hit(address(0), T0 + POLICY.limit * 100).allowed ? 0 : 1;
    store.close();
    return [{
      name: `MemoryStore, ${POLICY.limit} requests each (at the limit)`,
      sent: callers * POLICY.limit,
      tracked,
      before,
      after,
      ms,
      note: `next request refused: ${refused === 1}`,
    }];
  },
  // 1,000,000 callers into a store capped at 100,000 (RATE_LIMIT_MAX_CALLERS=100000).
  cap: () => {
    const cap = 100_000;
    const before = measure();
    const store = new MemoryStore(POLICY, { sweep: false, maxCallers: cap });
    const sent = 1_000_000;
    const started = performance.now();
    for (let i = 0; i < sent; i++) store.hit(address(i), T0 + (i >> 10));
    const ms = performance.now() - started;
    const after = measure();
    const { tracked, evicted } = store.stats();
    // The newest caller is still tracked, the first are forgotten.
    const newest = store.peek(address(sent - 1), T0 + 2000).remaining;
    const first = store.peek(address(0), T0 + 2000).remaining;
    store.close();
    return [{
      name: `MemoryStore capped at ${cap.toLocaleString("en")}`,
      sent,
      tracked,
      before,
      after,
      ms,
      note: `evicted ${
        evicted.toLocaleString("en")
      }; newest caller remaining ${newest}, first ${first}`,
    }];
  },
  "spray-500k": sprayCase(500_000),
  "spray-100k": sprayCase(100_000),
  // Pauses: 500,000 IPv6 callers tracked (the default cap), then 90 s of traffic on the store's own
  // clock that crosses 2^30 ms (where the store before its caller table moved its base time), with
  // the sweep every 100 ms as its timer runs it. The longest single call of each kind is the longest pause the store causes.
  pauses: pausesCase(address, "IPv4"),
  "pauses-ipv6": pausesCase(network, "IPv6 /64"),
  // Through the handler (trusted-proxy mode, X-Forwarded-For): the store and everything else.
  "handler-100k": async () => {
    const loaded = loadConfig(recordEnv({ TRUSTED_PROXIES: "127.0.0.1", ACCESS_LOG: "false" }));
    if (!loaded.ok) throw new Error(loaded.errors.join("; "));
    const content = loadContent(loaded.config, DISK_STATIC_FILES);
    if (!content.ok) throw new Error(content.errors.join("; "));
    const store = new MemoryStore(POLICY, { sweep: false, maxCallers: 100_001 });
    let clock = T0;
    const handler = createHandler({
      config: loaded.config,
      content: content.content,
      store,
      now: () => clock,
    });
    const info = { remoteAddr: { hostname: "127.0.0.1" } };
    const platform = "http://localhost:8000/api/v1/platform";
    for (let i = 0; i < 1000; i++) {
      await (await handler(new Request(platform), info)).body?.cancel();
    }
    const before = measure();
    const sent = 100_000;
    const started = performance.now();
    for (let i = 0; i < sent; i++) {
      clock = T0 + (i >> 10);
      const headers = { "x-forwarded-for": address(i + 1) };
      const response = await handler(new Request(platform, { headers }), info);
      await response.body?.cancel();
    }
    const ms = performance.now() - started;
    const after = measure();
    const tracked = store.stats().tracked - 1;
    store.close();
    return [{ name: "handler, GET /api/v1/platform", sent, tracked, before, after, ms }];
  },
};

function format(r: Row): string {
  return `| ${r.name} | ${r.sent.toLocaleString("en")} | ${r.tracked.toLocaleString("en")} | ${
    mb(r.before.rss)
  } → ${mb(r.after.rss)} | ${mb(r.before.heap)} → ${mb(r.after.heap)} | ${
    ((r.after.heap - r.before.heap) / r.tracked).toFixed(0)
  } B | ${((r.after.rss - r.before.rss) / r.tracked).toFixed(0)} B | ${
    (r.ms * 1e6 / r.sent).toFixed(0)
  } ns |${r.note ? ` ${r.note}` : ""}`;
}

const only = Deno.args[0];
if (only !== undefined) {
  console.log(JSON.stringify(await CASES[only]!()));
} else {
  const rows: string[] = [
    "| case | callers sent | tracked | RSS before → after | heap before → after | heap / tracked caller | RSS / tracked caller | time per request | |",
    "|---|---|---|---|---|---|---|---|---|",
  ];
  for (const name of Object.keys(CASES)) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--v8-flags=--expose-gc",
        "--allow-env",
        "--allow-read",
        "--allow-run=cat",
        import.meta.filename!,
        name,
      ],
      stderr: "inherit",
    }).output();
    if (!out.success) throw new Error(`case ${name} failed`);
    for (const r of JSON.parse(new TextDecoder().decode(out.stdout)) as Row[]) {
      rows.push(format(r));
      console.error(rows.at(-1));
    }
  }
  console.log(`\nDeno ${Deno.version.deno}, V8 ${Deno.version.v8}; every figure after a full GC\n`);
  console.log(rows.join("\n"));
}
