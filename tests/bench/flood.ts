/**
 * Connection flood against the real service: start `main.ts --listen` under a descriptor limit
 * (`ulimit -n`), open more idle connections than it allows, check that it is alive and still serves
 * a connection it accepted before, close the flood and time how long until a new client gets 200.
 *
 * Usage: deno task bench:flood [descriptor limit, default 1024] [connections, default limit + 200]
 * Prints one JSON line. Traffic goes to 127.0.0.1 only, bounded in count and time.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { startService } from "../_service_process.ts";

const DEFAULT_LIMIT = 1024;
const EXTRA_CONNECTIONS = 200;
const SETTLE_MS = 1000;
const RECOVERY_TIMEOUT_MS = 15_000;
const POLL_MS = 20;

const limit = Number(Deno.args[0] ?? DEFAULT_LIMIT);
const connections = Number(Deno.args[1] ?? limit + EXTRA_CONNECTIONS);

/** One request on an open connection; true when it was answered 200 within a second. */
async function served(conn: Deno.Conn): Promise<boolean> {
  await conn.write(new TextEncoder().encode("GET /llms.txt HTTP/1.1\r\nHost: x\r\n\r\n"));
  const buffer = new Uint8Array(65_536);
  const read = await Promise.race([
    conn.read(buffer).catch(() => null),
    new Promise<null>((resolve) => setTimeout(() => resolve(null), 1000)),
  ]);
  return read !== null && new TextDecoder().decode(buffer.subarray(0, read)).startsWith(
    "HTTP/1.1 200",
  );
}

const service = await startService({ RATE_LIMIT: "1000000" }, 20_000, { descriptorLimit: limit });
let exited = false;
service.exited.then(() => exited = true);
const port = Number(new URL(service.url).port);
const kept = await Deno.connect({ hostname: "127.0.0.1", port });
const keptBefore = await served(kept);
const flood: Deno.Conn[] = [];
let refused = 0;
for (let i = 0; i < connections; i++) {
  try {
    flood.push(await Deno.connect({ hostname: "127.0.0.1", port }));
  } catch {
    refused++;
  }
}
await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
const keptDuring = !exited && await served(kept).catch(() => false);
for (const conn of flood) conn.close();
const released = Date.now();
let recoveredMs: number | undefined;
while (recoveredMs === undefined && Date.now() - released < RECOVERY_TIMEOUT_MS) {
  const status = await fetch(`${service.url}/llms.txt`)
    .then(async (response) => (await response.body?.cancel(), response.status))
    .catch(() => undefined);
  if (status === 200) recoveredMs = Date.now() - released;
  else await new Promise((resolve) => setTimeout(resolve, POLL_MS));
}
kept.close();
const warnings = service.events.filter((event) => event.level === "warn").length;
console.log(JSON.stringify({
  descriptorLimit: limit,
  connections,
  accepted: flood.length,
  refused,
  aliveAfterFlood: !exited,
  keptConnectionServed: { before: keptBefore, during: keptDuring },
  recoveredMs: recoveredMs ?? null,
  warnings,
}));
await service.stop();
