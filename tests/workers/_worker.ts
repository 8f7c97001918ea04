/**
 * The service's Worker on real workerd for the tests: built once per test process (`deno task
 * worker:build`'s `buildWorker`), served through miniflare as `deno task worker` serves it
 * (`serveWorker`: wrangler.json's compatibility date and Durable Object binding), on an ephemeral
 * loopback port, with the Durable Objects' storage in a folder the test owns.
 *
 * @module
 */

import { buildWorker, type BuiltWorker } from "../../lib/build/worker.ts";
import { type ServedWorker, serveWorker } from "../../lib/build/worker_dev.ts";
import type { VarValue } from "../../lib/build/wrangler_config.ts";
import { ROOT } from "../_deno_info.ts";

let built: Promise<BuiltWorker> | undefined;

/** Builds the Worker, once per process. */
export function builtWorker(): Promise<BuiltWorker> {
  return built ??= buildWorker(ROOT);
}

/** A Worker on workerd; dispose of it (`await using`) to stop workerd. */
export interface TestWorker extends AsyncDisposable {
  /** `http://127.0.0.1:<port>`, without a trailing slash. */
  url: string;
  /** Each instance's origin (`instances`), the first's first. */
  urls: string[];
  /** The accounting of the rate limiter's object named `name` (`ServedWorker.objectUsage`). */
  objectUsage: ServedWorker["objectUsage"];
  /** Stops workerd. */
  close(): Promise<void>;
}

/**
 * Builds (once) and serves the Worker with `bindings` (vars), its Durable Object storage in
 * `persist` (a folder that outlives a restart), or in memory; `instances` Workers sharing the one
 * namespace. `PUBLIC_BASE_URL` is `http://127.0.0.1` unless `bindings` set it (`""` leaves it unset);
 * `onLog` receives what the Worker logs.
 */
export async function startWorker(
  bindings: Record<string, VarValue>,
  persist: string | false = false,
  instances = 1,
  onLog?: (line: { message: string; level: string }) => void,
): Promise<TestWorker> {
  await builtWorker();
  const served: ServedWorker = await serveWorker({
    root: ROOT,
    port: 0,
    persist,
    bindings,
    baseUrl: "http://127.0.0.1",
    instances,
    ...(onLog ? { onLog } : {}),
  });
  const close = () => served.close();
  return {
    url: served.url.origin,
    urls: served.urls.map((url) => url.origin),
    objectUsage: (name) => served.objectUsage(name),
    close,
    [Symbol.asyncDispose]: close,
  };
}
