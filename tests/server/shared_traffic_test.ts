/**
 * No silent multiplication of the limit: with the memory store, each way the service can recognise
 * that several processes or isolates share one caller's traffic (`deno serve --parallel`,
 * `REUSE_PORT=true`, Deno Deploy) prints one warning line at start naming the variable to set; a
 * shared store, or one process, prints none. Real processes throughout.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { DEPLOY_PLATFORM } from "../_deno_deploy_env.ts";
import { freePort, waitForPort } from "../_redis.ts";
import { startService } from "../_service_process.ts";
import { WORKERS_WAIT_MS } from "../../lib/server/shared_traffic.ts";

const ROOT = join(import.meta.dirname!, "..", "..");
const MAIN = join(ROOT, "main.ts");
const CONFIG = join(ROOT, "deno.json");

/** The warning lines among `events`. */
function warnings(events: Record<string, unknown>[]): string[] {
  return events.filter((event) => event.level === "warn").map((event) => String(event.message));
}

/**
 * `deno serve` (with `--parallel` and `DENO_JOBS=jobs` when `jobs` is given) on a free port, until
 * it answers and the workers have had time to find each other; then SIGTERM. Its JSON events.
 */
async function serveEvents(
  jobs: number | undefined,
  env: Record<string, string> = {},
): Promise<Record<string, unknown>[]> {
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "serve",
      "--config",
      CONFIG,
      ...(jobs === undefined ? [] : ["--parallel"]),
      "--port",
      String(port),
      "--host",
      "127.0.0.1",
      "--allow-net",
      "--allow-read",
      "--allow-write",
      "--allow-env",
      MAIN,
    ],
    env: {
      PUBLIC_BASE_URL: "http://127.0.0.1",
      ACCESS_LOG: "false",
      NO_COLOR: "1",
      ...(jobs === undefined ? {} : { DENO_JOBS: String(jobs) }),
      ...env,
    },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  try {
    await waitForPort(port, 20_000);
    await new Promise((resolve) => setTimeout(resolve, WORKERS_WAIT_MS + 1500));
  } finally {
    child.kill("SIGTERM");
    await child.status;
  }
  const events: Record<string, unknown>[] = [];
  for (const line of (await stderr).split("\n")) {
    // deno serve --parallel prefixes nothing on the service's own stderr lines; tolerate a prefix.
    const json = line.slice(line.indexOf("{"));
    try {
      events.push(JSON.parse(json));
    } catch { /* Deno's own lines */ }
  }
  return events;
}

Deno.test("deno serve --parallel with the memory store: one warning line for the process, naming RATE_LIMIT_STORE", async () => {
  const said = warnings(await serveEvents(2));
  assert.equal(said.length, 1, said.join("\n"));
  assert.match(said[0]!, /^deno serve --parallel runs 2 workers, .*set RATE_LIMIT_STORE=kv/);
});

Deno.test("deno serve --parallel with the KV store, and deno serve with one worker: no warning", async () => {
  const dir = Deno.makeTempDirSync();
  try {
    const kv = await serveEvents(2, {
      RATE_LIMIT_STORE: "kv",
      KV_PATH: join(dir, "limits.sqlite3"),
      RATE_LIMIT_CONSISTENCY: "local-first",
    });
    assert.deepEqual(warnings(kv), []);
    assert.deepEqual(warnings(await serveEvents(undefined)), []);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("two processes with REUSE_PORT=true and the memory store: each says once that it counts alone, naming RATE_LIMIT_STORE", async () => {
  const port = String(freePort());
  const first = await startService({ PORT: port, REUSE_PORT: "true" });
  const second = await startService({ PORT: port, REUSE_PORT: "true" });
  try {
    for (const service of [first, second]) {
      const said = warnings(service.events);
      assert.equal(said.length, 1, said.join("\n"));
      assert.match(said[0]!, /^REUSE_PORT=true with the memory store: .*set RATE_LIMIT_STORE=kv/);
    }
  } finally {
    await first.stop();
    await second.stop();
  }
  // A shared store: nothing to say.
  const dir = Deno.makeTempDirSync();
  const shared = await startService({
    PORT: port,
    REUSE_PORT: "true",
    RATE_LIMIT_STORE: "kv",
    KV_PATH: join(dir, "limits.sqlite3"),
  });
  try {
    assert.deepEqual(warnings(shared.events), []);
  } finally {
    await shared.stop();
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("Deno Deploy with the memory store: one warning line naming RATE_LIMIT_STORE and the database to attach", async () => {
  const service = await startService({
    ...DEPLOY_PLATFORM,
    DENO_SERVE_ADDRESS: `tcp:127.0.0.1:${freePort()}`,
  });
  try {
    const said = warnings(service.events);
    assert.equal(said.length, 1, said.join("\n"));
    assert.match(said[0]!, /^the memory store on Deno Deploy: .*attach a Deno KV database/);
    assert.match(said[0]!, /set RATE_LIMIT_STORE=kv/);
  } finally {
    await service.stop();
  }
});

Deno.test("one process with the memory store, listening on its own port: no warning", async () => {
  const service = await startService({});
  try {
    assert.deepEqual(warnings(service.events), []);
  } finally {
    await service.stop();
  }
});
