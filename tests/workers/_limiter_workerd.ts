/**
 * Real workerd for the Durable Object store's tests and figures: the test Worker
 * (`_limiter_worker.ts`) bundled by `deno bundle` at test time, served by workerd from npm through
 * miniflare (pinned here; `deno test` installs both from npm, so a fresh clone needs nothing else),
 * with Durable Object storage (SQLite-backed, as the shipped migration declares) persisted in a
 * folder the test owns.
 *
 * miniflare rather than `wrangler dev --local`: it is the library wrangler runs workerd with, it
 * starts from a script and options (no config file, no project folder), and it can run two Workers
 * in one workerd bound to one Durable Object namespace, which is how two Worker instances share a
 * limit here.
 *
 * @module
 */

import { join } from "node:path";
import { Miniflare } from "npm:miniflare@4.20260730.0";
import { ROOT } from "../_deno_info.ts";

/** The compatibility date of the test Worker: the workerd that miniflare pins. */
export const COMPATIBILITY_DATE = "2026-07-30";

/** The test Worker, bundled into one ES module (`cloudflare:workers` left to workerd). */
export async function buildLimiterWorker(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "limiter-worker-" });
  try {
    const out = join(dir, "worker.js");
    const build = await new Deno.Command(Deno.execPath(), {
      args: [
        "bundle",
        "--quiet",
        "--platform=browser",
        "--external=cloudflare:*",
        "--output",
        out,
        "tests/workers/_limiter_worker.ts",
      ],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!build.success) throw new Error(new TextDecoder().decode(build.stderr));
    return await Deno.readTextFile(out);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The Durable Object bindings of the test Worker, each a class it exports. */
const OBJECTS = {
  RATE_LIMITER: "RateLimiterObject",
  SLOW: "SlowObject",
  STALL: "StallObject",
  BROKEN: "BrokenObject",
} as const;

/** Options of {@linkcode startLimiterWorkerd}. */
export interface WorkerdOptions {
  /** The bundled test Worker. */
  script: string;
  /** Where Durable Object storage persists. */
  persist: string;
  /** The limit (default 60). */
  limit?: number;
  /** The window in seconds (default 60). */
  windowSeconds?: number;
  /** How long an idle caller is kept, in ms (default: the shipped object's day). */
  idleMs?: number;
  /** A fixed number of shards; omitted, one object per caller. */
  shards?: number;
  /** How many Workers (each its own script and isolate) share the one namespace (default 1). */
  workers?: number;
  /** Receives each line the Workers log (their console), instead of this process's output. */
  onLog?: (line: { level: string; message: string }) => void;
}

/** A running workerd: the URL of each of its Workers, and how to stop it. */
export interface Workerd {
  /** The URL each Worker answers on (one per Worker). */
  urls: URL[];
  /** Stops workerd. */
  dispose(): Promise<void>;
}

/**
 * Starts workerd with the test Worker (or several: the first defines the objects, the others bind
 * to its namespace), each on its own port of 127.0.0.1.
 */
export async function startLimiterWorkerd(options: WorkerdOptions): Promise<Workerd> {
  const bindings: Record<string, string> = {
    LIMIT: String(options.limit ?? 60),
    WINDOW_SECONDS: String(options.windowSeconds ?? 60),
  };
  if (options.shards !== undefined) bindings.SHARDS = String(options.shards);
  if (options.idleMs !== undefined) bindings.IDLE_MS = String(options.idleMs);
  const count = options.workers ?? 1;
  const workers = Array.from({ length: count }, (_, i) => ({
    name: `limiter-${i}`,
    modules: true,
    script: options.script,
    compatibilityDate: COMPATIBILITY_DATE,
    bindings,
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
    durableObjects: Object.fromEntries(
      Object.entries(OBJECTS).map(([binding, className]) => [
        binding,
        { className, useSQLite: true, ...(i > 0 ? { scriptName: "limiter-0" } : {}) },
      ]),
    ),
  }));
  const onLog = options.onLog;
  const mf = new Miniflare({
    workers,
    durableObjectsPersist: options.persist,
    host: "127.0.0.1",
    // Miniflare checks that the handler returns nothing.
    ...(onLog
      ? {
        handleStructuredLogs: (line: { level: string; message: string }) =>
          void onLog({ level: line.level, message: line.message }),
      }
      : {}),
  });
  try {
    await mf.ready;
    const urls = await Promise.all(workers.map((w) => mf.unsafeGetDirectURL(w.name)));
    return { urls, dispose: () => mf.dispose() };
  } catch (error) {
    await mf.dispose().catch(() => {});
    throw error;
  }
}

/** One decision through the Worker at `url`, as the test Worker reports it. */
export interface HitReport {
  decision: { allowed: boolean; remaining: number; resetSeconds: number; unavailable?: true };
  byPolicy: boolean;
  promise: boolean;
  ms: number;
  /** The store's breaker state once it answered (`open`: the namespace is down). */
  breaker: "closed" | "open" | "half-open";
  /** The object calls the store made so far: to callers' objects, to its canaries. */
  calls: { objects: number; canaries: number };
}

/** The decisions of a `/burst`, in the order of their callers. */
export interface BurstReport {
  reports: Array<Pick<HitReport, "decision" | "byPolicy">>;
  breaker: HitReport["breaker"];
}

/** `GET path` on the Worker at `url`, as JSON. */
export async function getJson<T>(url: URL, path: string): Promise<T> {
  const response = await fetch(new URL(path, url));
  const text = await response.text();
  if (!response.ok) throw new Error(`${path}: ${response.status} ${text.slice(0, 500)}`);
  return JSON.parse(text) as T;
}
