/**
 * `deno task worker`: builds the Worker (`worker.ts`) and serves it on real workerd, through
 * miniflare from npm, at `http://127.0.0.1:$PORT` (default 8787), with the Durable Object bound as
 * `wrangler.json` binds it and its storage kept in `dist/worker/state/` across restarts.
 *
 * Miniflare rather than `wrangler dev --local`: both run the same workerd, but miniflare is a
 * library Deno imports from npm (no `node_modules`, no second CLI, no login or telemetry prompt), it
 * listens on the port it is given (0 in tests) and says so, and the tests start and stop it in
 * process, with a storage folder of their own. `wrangler.json` stays the one description of the
 * Worker: its compatibility date, its Durable Object bindings and its vars are read from it here.
 * Bindings: the vars of `wrangler.json` (JSON values as wrangler passes them: `"RATE_LIMIT": 5` is a
 * number), then the service's variables (`lib/config/env.ts`) set in this process's environment, so
 * `RATE_LIMIT=5 deno task worker` works as with `deno task start`. `PUBLIC_BASE_URL`, which the
 * Worker requires, defaults here to `http://127.0.0.1:$PORT`: this task is the deployment, and it
 * knows its address; a request never sets it. Those bindings are checked as an isolate checks them
 * before anything is built (`wrangler_config.ts`): a configuration that cannot work on Workers (a
 * `PUBLIC_BASE_URL` with a path, a `TRUSTED_PROXIES` over Cloudflare's addresses, any value
 * `deno task start` refuses) stops the task with one sentence per problem, naming the variable,
 * and exit code 1. wrangler.json's `ratelimits` are bound as declared (the new callers' budget,
 * `lib/workers/new_caller_gate.ts`), miniflare counting them as one location would.
 *
 * Not a server for the open internet: it listens on 127.0.0.1 only, and workerd's own HTTP front
 * answers malformed requests (unknown methods, bad `Host`, absolute-form targets, odd
 * `Content-Length`) 500 or 501 without the service's Error shape, where Cloudflare's edge refuses
 * them before the Worker (deploy/README.md, "Cloudflare Workers").
 *
 * @module
 */
// deno-lint-ignore-file no-console -- a development server's lines

import { Miniflare } from "npm:miniflare@4.20260730.0";
import { ENV_NAMES } from "../config/env.ts";
import { RATE_LIMITER_BINDING } from "../workers/bindings.ts";
import type { ObjectUsage } from "../workers/rate_limiter_object.ts";
import { buildWorker, WORKER_DIR, WORKER_MODULE } from "./worker.ts";
import {
  checkDeployment,
  miniflareRatelimits,
  readWrangler,
  reportDeployment,
  type VarValue,
} from "./wrangler_config.ts";

/** The namespace of the rate limiter's objects, as miniflare's proxy exposes it to this process. */
interface ObjectNamespace {
  idFromName(name: string): unknown;
  get(id: unknown): { usage(): Promise<ObjectUsage>; [Symbol.dispose]?: () => void };
}

/** Options of {@linkcode serveWorker}. */
export interface ServeWorkerOptions {
  /** The project's root (wrangler.json, dist/worker/). */
  root: string;
  /** The port on 127.0.0.1 (0: any free one). */
  port: number;
  /** Where the Durable Objects keep their storage; `false` keeps it in memory. */
  persist: string | false;
  /** Bindings over wrangler.json's vars (vars and secrets). */
  bindings?: Record<string, VarValue>;
  /** Receives each line the Worker logs (its console), instead of this process's output. */
  onLog?: (line: { message: string; level: string }) => void;
  /** A port of 127.0.0.1 for workerd's V8 inspector (benchmarks read the isolate's heap there). */
  inspectorPort?: number;
  /** `PUBLIC_BASE_URL` when neither wrangler.json's vars nor `bindings` set it. */
  baseUrl?: string;
  /**
   * How many Workers to run, each its own isolate on a port of its own, all bound to the first
   * one's Durable Object namespace, as Cloudflare's isolates share it (default 1; tests).
   */
  instances?: number;
  /** `false` leaves wrangler.json's Rate Limiting bindings out (the new callers' gate; benchmarks). */
  ratelimits?: false;
}

/** A Worker served by workerd. */
export interface ServedWorker {
  /** Its address, `http://127.0.0.1:PORT/`. */
  url: URL;
  /** Each instance's own address (`instances`), the first's first. */
  urls: URL[];
  /**
   * The accounting of the rate limiter's object named `name` (a caller key): what it holds and
   * wrote, read through miniflare (tests and benchmarks: whether a caller's object was created).
   */
  objectUsage(name: string): Promise<ObjectUsage>;
  /** Stops workerd. */
  close(): Promise<void>;
}

/** Serves the built Worker (`dist/worker/worker.js`) on workerd as wrangler.json describes it. */
export async function serveWorker(options: ServeWorkerOptions): Promise<ServedWorker> {
  const { root } = options;
  const wrangler = await readWrangler(root);
  const ratelimits = options.ratelimits === false ? {} : miniflareRatelimits(wrangler);
  const count = options.instances ?? 1;
  const workers = Array.from({ length: count }, (_, i) => ({
    name: i === 0 ? "discovery" : `discovery-${i}`,
    modules: true,
    scriptPath: `${root}/${WORKER_MODULE}`,
    modulesRoot: `${root}/${WORKER_DIR}`,
    compatibilityDate: wrangler.compatibility_date,
    bindings: {
      ...(options.baseUrl === undefined ? {} : { PUBLIC_BASE_URL: options.baseUrl }),
      ...wrangler.vars,
      ...options.bindings,
    },
    durableObjects: Object.fromEntries(
      wrangler.durable_objects.bindings.map(({ name, class_name }) => [
        name,
        { className: class_name, useSQLite: true, ...(i > 0 ? { scriptName: "discovery" } : {}) },
      ]),
    ),
    // Each Worker's bindings, its objects' too; one namespace_id shares its counts among them.
    ratelimits,
    ...(count > 1 ? { unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }] } : {}),
  }));
  const miniflare = new Miniflare({
    workers,
    durableObjectsPersist: options.persist,
    host: "127.0.0.1",
    port: options.port,
    ...(options.onLog ? { handleStructuredLogs: logTo(options.onLog) } : {}),
    ...(options.inspectorPort === undefined
      ? {}
      : { inspectorPort: options.inspectorPort, inspectorHost: "127.0.0.1" }),
  });
  try {
    const url = await miniflare.ready;
    const urls = count > 1
      ? await Promise.all(workers.map((worker) => miniflare.unsafeGetDirectURL(worker.name)))
      : [url];
    const objectUsage = async (name: string) => {
      const objects = (await miniflare.getDurableObjectNamespace(
        RATE_LIMITER_BINDING,
      )) as unknown as ObjectNamespace;
      const id = objects.idFromName(name);
      const stub = objects.get(id);
      try {
        return await stub.usage();
      } finally {
        // Held until the answer is in (miniflare frees a proxy's far end when this side collects
        // it), then released: workerd keeps an RPC stub until it is disposed.
        void id;
        stub[Symbol.dispose]?.();
      }
    };
    return { url, urls, objectUsage, close: () => miniflare.dispose() };
  } catch (error) {
    await miniflare.dispose().catch(() => {});
    throw error;
  }
}

/** A miniflare log handler over `onLog` (miniflare checks that a handler returns nothing). */
function logTo(
  onLog: NonNullable<ServeWorkerOptions["onLog"]>,
): (line: { message: string; level: string }) => void {
  return ({ message, level }) => {
    onLog({ message, level });
  };
}

/** The service's variables set in this process's environment. */
function environmentBindings(): Record<string, string> {
  const set: Record<string, string> = {};
  for (const name of ENV_NAMES) {
    const value = Deno.env.get(name);
    if (value !== undefined && name !== "PORT") set[name] = value;
  }
  return set;
}

if (import.meta.main) {
  const root = new URL("../..", import.meta.url).pathname;
  const port = Number(Deno.env.get("PORT") ?? "8787");
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    console.error(
      `PORT must be a port number (0 to 65535), got ${JSON.stringify(Deno.env.get("PORT"))}`,
    );
    Deno.exit(1);
  }
  const baseUrl = port === 0 ? undefined : `http://127.0.0.1:${port}`;
  const bindings = environmentBindings();
  // Refused before anything is built or served, as the isolate would refuse it (it answers 500).
  const wrangler = await readWrangler(root);
  const vars = { ...(baseUrl ? { PUBLIC_BASE_URL: baseUrl } : {}), ...wrangler.vars, ...bindings };
  if (!reportDeployment(checkDeployment(wrangler, vars, true), "deno task worker")) Deno.exit(1);
  const built = await buildWorker(root);
  console.log(`built ${WORKER_MODULE}: ${built.bytes} bytes (${built.gzipBytes} gzipped)`);
  const served = await serveWorker({
    root,
    port,
    persist: `${root}/${WORKER_DIR}/state`,
    bindings,
    ...(baseUrl === undefined ? {} : { baseUrl }),
  });
  console.log(`serving the Worker on workerd at ${served.url.origin} (Ctrl-C stops)`);
  const stop = () => served.close().then(() => Deno.exit(0));
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
}
