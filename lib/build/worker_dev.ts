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
 * number), then the service's variables (`lib/config.ts`) set in this process's environment, so
 * `RATE_LIMIT=5 deno task worker` works as with `deno task start`. `PUBLIC_BASE_URL`, which the
 * Worker requires, defaults here to `http://127.0.0.1:$PORT`: this task is the deployment, and it
 * knows its address; a request never sets it.
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
import { ENV_NAMES } from "../config.ts";
import { buildWorker, WORKER_DIR, WORKER_MODULE } from "./worker.ts";

/** The parts of wrangler.json this reads. */
interface WranglerConfig {
  compatibility_date: string;
  durable_objects: { bindings: Array<{ name: string; class_name: string }> };
  vars?: Record<string, VarValue>;
}

/** A var as `wrangler.json` may give it: text, or a JSON number or boolean (objects are refused). */
export type VarValue = string | number | boolean;

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
}

/** A Worker served by workerd. */
export interface ServedWorker {
  /** Its address, `http://127.0.0.1:PORT/`. */
  url: URL;
  /** Each instance's own address (`instances`), the first's first. */
  urls: URL[];
  /** Stops workerd. */
  close(): Promise<void>;
}

/** Serves the built Worker (`dist/worker/worker.js`) on workerd as wrangler.json describes it. */
export async function serveWorker(options: ServeWorkerOptions): Promise<ServedWorker> {
  const { root } = options;
  const wrangler = JSON.parse(
    await Deno.readTextFile(`${root}/wrangler.json`),
  ) as WranglerConfig;
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
    return { url, urls, close: () => miniflare.dispose() };
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
  const built = await buildWorker(root);
  console.log(`built ${WORKER_MODULE}: ${built.bytes} bytes (${built.gzipBytes} gzipped)`);
  const served = await serveWorker({
    root,
    port,
    persist: `${root}/${WORKER_DIR}/state`,
    bindings: environmentBindings(),
    ...(port === 0 ? {} : { baseUrl: `http://127.0.0.1:${port}` }),
  });
  console.log(`serving the Worker on workerd at ${served.url.origin} (Ctrl-C stops)`);
  const stop = () => served.close().then(() => Deno.exit(0));
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
}
