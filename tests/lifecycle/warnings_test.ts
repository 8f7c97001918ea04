/**
 * Every start-up warning (lib/lifecycle/warnings.ts), given by every entry it applies to, as that
 * entry really starts: Deno's `main.ts --listen`, `deno serve --parallel`, `main.ts` as Deno
 * Deploy runs it, Node 24's `lib/node/main.ts`, and the Worker on workerd. Each entry is started
 * once with every setting that makes a warning due, and must give exactly the warnings listed for
 * it: none missing (Node once lacked two of Deno's), none it should not give.
 *
 * Slow (five processes, one of them workerd): the point is the entries as they start, not the
 * warnings' functions.
 *
 * @module
 */

import assert from "node:assert/strict";
import { DEPLOY_PLATFORM } from "../_deno_deploy_env.ts";
import { ensureNodeModules, nodeBinary } from "../_node.ts";
import { freePort, waitForPort } from "../_redis.ts";
import { startService } from "../_service_process.ts";
import { startWorker } from "../workers/_worker.ts";
import { type Entry, WARNING_ENTRIES, type WarningCode } from "../../lib/lifecycle/warnings.ts";

const ROOT = new URL("../..", import.meta.url).pathname;
const DAY_MS = 86_400_000;

/** An ISO date `days` from today. */
function day(days: number): string {
  return new Date(Date.now() + days * DAY_MS).toISOString().slice(0, 10);
}

/**
 * What makes each warning due: one setting each (with `SUNSET_DATE` 30 days away, announced 100
 * days before it), all given to every entry at once.
 */
const DUE: Readonly<Record<WarningCode, Record<string, string>>> = {
  report_mode: { RATE_LIMIT_MODE: "report" },
  sunset_soon: { SUNSET_DATE: day(30), DEPRECATION_DATE: day(-70) },
  memory_reuse_port: { REUSE_PORT: "true" },
  memory_deno_deploy: DEPLOY_PLATFORM,
  memory_parallel_workers: { DENO_JOBS: "2" },
  memory_workers: { RATE_LIMIT_STORE: "memory" },
  // A documentation range: none of Cloudflare's, so taken and warned of, not refused.
  workers_trusted_proxies: { TRUSTED_PROXIES: "203.0.113.0/24" },
  workers_http_base_url: { PUBLIC_BASE_URL: "http://api.example.com" },
  // Not the port deno serve is given.
  serve_port: { PORT: "1" },
  // OTEL_EXPORTER_OTLP_TIMEOUT unset (Deno's 10 s), a collector that is not there.
  otel_exit_timeout: { OTEL_DENO: "true", OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9" },
  otel_tracing_unset: { OTEL_DENO: "true" },
  otel_console_capture: { OTEL_DENO: "true" },
  otel_service_name_unset: { OTEL_DENO: "true" },
};

/** Every setting of {@linkcode DUE} but Deno Deploy's platform, which makes main.ts another entry. */
const EVERY_WARNING: Record<string, string> = Object.assign(
  {},
  ...Object.entries(DUE).filter(([code]) => code !== "memory_deno_deploy").map(([, env]) => env),
);

/** The `warning` codes among JSON lines. */
function codesIn(lines: readonly string[]): WarningCode[] {
  const codes = new Set<WarningCode>();
  for (const line of lines) {
    try {
      const event = JSON.parse(line.slice(line.indexOf("{")));
      if (event.level === "warn" && typeof event.warning === "string") codes.add(event.warning);
    } catch {
      // Not JSON: the runtime's own lines.
    }
  }
  return [...codes].sort();
}

/** The warnings `entry` must give with every one due. */
function expectedOf(entry: Entry): WarningCode[] {
  return (Object.keys(WARNING_ENTRIES) as WarningCode[])
    .filter((code) => WARNING_ENTRIES[code].includes(entry)).sort();
}

/** The JSON lines the service wrote on either stream. */
function linesOf(events: Record<string, unknown>[]): string[] {
  return events.map((event) => JSON.stringify(event));
}

async function denoListen(): Promise<WarningCode[]> {
  // With OpenTelemetry under capture, Deno prints info events on stdout.
  const service = await startService(EVERY_WARNING, 30_000, { stdoutEvents: true });
  await service.stop();
  return codesIn(linesOf(service.events));
}

async function denoDeploy(): Promise<WarningCode[]> {
  const service = await startService(
    { ...EVERY_WARNING, ...DEPLOY_PLATFORM, DENO_SERVE_ADDRESS: `tcp:127.0.0.1:${freePort()}` },
    30_000,
    { stdoutEvents: true },
  );
  await service.stop();
  return codesIn(linesOf(service.events));
}

/** `deno serve --parallel` until it answers and its workers have found each other, then SIGTERM. */
async function denoServe(): Promise<WarningCode[]> {
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "serve",
      "--parallel",
      "--config",
      `${ROOT}deno.json`,
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "--allow-net",
      "--allow-read",
      "--allow-env",
      `${ROOT}main.ts`,
    ],
    env: { ...EVERY_WARNING, PUBLIC_BASE_URL: "http://127.0.0.1", NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
  ]);
  const lines: string[] = [];
  try {
    await waitForPort(port, 30_000);
    // The workers say hello for a second (lib/server/shared_traffic.ts), then one warns.
    await new Promise((resolve) => setTimeout(resolve, 2_500));
  } finally {
    child.kill("SIGTERM");
    await child.status;
    for (const text of await output) lines.push(...text.split("\n"));
  }
  return codesIn(lines);
}

async function node(): Promise<WarningCode[]> {
  await ensureNodeModules();
  const service = await startService(EVERY_WARNING, 30_000, { node: await nodeBinary(24) });
  await service.stop();
  return codesIn(linesOf(service.events));
}

async function workers(): Promise<WarningCode[]> {
  const lines: string[] = [];
  await using worker = await startWorker(
    EVERY_WARNING,
    false,
    1,
    ({ message }) => lines.push(message),
  );
  // An isolate configures itself (and warns) at its first request.
  const response = await fetch(`${worker.url}/api/v1/platform`, {
    headers: { "cf-connecting-ip": "192.0.2.1" },
  });
  assert.equal(response.status, 200);
  await response.body?.cancel();
  return codesIn(lines);
}

const STARTS: Readonly<Record<Entry, () => Promise<WarningCode[]>>> = {
  "deno": denoListen,
  "deno-serve": denoServe,
  "deno-deploy": denoDeploy,
  "node": node,
  "workers": workers,
};

Deno.test("every warning is made due by the test, and applies to at least one entry", () => {
  assert.deepEqual(Object.keys(DUE).sort(), Object.keys(WARNING_ENTRIES).sort());
  for (const [code, entries] of Object.entries(WARNING_ENTRIES)) {
    assert.ok(entries.length > 0, code);
  }
});

Deno.test("the warnings Deno's main.ts --listen gives on Deno, Node gives too, but OpenTelemetry's (Node's entry exports nothing)", () => {
  const otel = (code: WarningCode) => code.startsWith("otel_");
  assert.deepEqual(
    expectedOf("deno").filter((code) => !otel(code)),
    expectedOf("node"),
  );
});

for (
  const [entry, start] of Object.entries(STARTS) as Array<[Entry, () => Promise<WarningCode[]>]>
) {
  Deno.test(`${entry}: gives every warning that applies to it, and no other`, async () => {
    assert.deepEqual(await start(), expectedOf(entry));
  });
}
