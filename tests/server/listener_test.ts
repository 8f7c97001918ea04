/**
 * Tests of lib/server/listener.ts: the drain's `Connection: close`, and, on the real service process, surviving
 * a flood of idle connections under a low descriptor limit and a SIGTERM under keep-alive load that
 * loses no request.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createDrain } from "../../lib/server/listener.ts";
import { exchange, getHead } from "../_keep_alive_load.ts";
import { startService } from "../_service_process.ts";

const INFO = {
  remoteAddr: { transport: "tcp", hostname: "127.0.0.1", port: 1 },
  completed: Promise.resolve(),
} as unknown as Deno.ServeHandlerInfo<Deno.NetAddr>;

Deno.test("createDrain() adds Connection: close only once closing, keeping status, headers and body", async () => {
  const shared = new Response("body", { status: 201, headers: { "x-kept": "yes" } });
  const drain = createDrain();
  const handler = drain.wrap(() => shared.clone());
  const before = await handler(new Request("http://localhost/"), INFO);
  assert.equal(before.headers.get("connection"), null);
  assert.equal(drain.closing, false);
  drain.close();
  assert.equal(drain.closing, true);
  const after = await handler(new Request("http://localhost/"), INFO);
  assert.equal(after.headers.get("connection"), "close");
  assert.equal(after.status, 201);
  assert.equal(after.headers.get("x-kept"), "yes");
  assert.equal(await after.text(), "body");
  assert.equal(shared.headers.get("connection"), null);
});

Deno.test("createDrain() answers with Connection: close even when the handler's headers are immutable", async () => {
  const drain = createDrain();
  drain.close();
  const handler = drain.wrap(() => Response.redirect("http://localhost/elsewhere", 302));
  const response = await handler(new Request("http://localhost/"), INFO);
  assert.equal(response.status, 302);
  assert.equal(response.headers.get("connection"), "close");
});

const FLOOD_LIMIT = 256;
const FLOOD_CONNECTIONS = 400;
const RECOVERY_BUDGET_MS = 5000;

Deno.test("a flood of idle connections past the descriptor limit does not end the process: it serves again once they close", async () => {
  const service = await startService(
    { RATE_LIMIT: "100000" },
    20_000,
    { descriptorLimit: FLOOD_LIMIT },
  );
  const port = Number(new URL(service.url).port);
  const flood: Deno.Conn[] = [];
  const kept = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    assert.equal((await exchange(kept, getHead("/api/v1/platform")))?.status, 200);
    for (let i = 0; i < FLOOD_CONNECTIONS; i++) {
      try {
        flood.push(await Deno.connect({ hostname: "127.0.0.1", port }));
      } catch {
        // Refused or reset: the listener is down, which is what the flood is for.
      }
    }
    const warned = await waitFor(
      () => service.events.some((e) => e.message === WARNING),
      RECOVERY_BUDGET_MS,
    );
    assert.ok(warned, `no accept failure logged: ${JSON.stringify(service.events)}`);
    // The connection accepted before the incident is still served during it.
    assert.equal((await exchange(kept, getHead("/api/v1/platform")))?.status, 200);
    for (const conn of flood.splice(0)) conn.close();
    const released = Date.now();
    let status: number | undefined;
    while (status !== 200 && Date.now() - released < RECOVERY_BUDGET_MS) {
      status = await fetch(`${service.url}/api/v1/platform`)
        .then(async (response) => (await response.body?.cancel(), response.status))
        .catch(() => undefined);
      if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.equal(status, 200, "not serving again within the budget after the flood was released");
    await waitFor(
      () => service.events.some((e) => e.message === "accepting connections again"),
      RECOVERY_BUDGET_MS,
    );
    const messages = service.events.map((e) => e.message);
    assert.equal(messages.filter((m) => m === WARNING).length, 1, messages.join("\n"));
    assert.equal(messages.filter((m) => m === "accepting connections again").length, 1);
    // The listener that failed is shut down with the others: the process stops cleanly.
    kept.close();
    await service.stop();
    assert.equal(await service.exited, 0);
  } finally {
    for (const conn of flood) conn.close();
    try {
      kept.close();
    } catch { /* closed above */ }
    await service.stop();
  }
});

const WARNING =
  "accepting connections failed: serving the open ones and listening again when possible";

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}

const KEEP_ALIVE_CONNECTIONS = 32;
/**
 * Requests answered before SIGTERM: the load is under way on every connection (counted, not timed:
 * a fresh process on a machine busy with the parallel suite answered none in its first 300 ms).
 */
const LOAD_BEFORE_SIGTERM = 4 * KEEP_ALIVE_CONNECTIONS;

Deno.test("SIGTERM under keep-alive load: every request sent is answered, each connection is told to close first", async () => {
  const service = await startService({ RATE_LIMIT: "100000" });
  const port = Number(new URL(service.url).port);
  const conns = await Promise.all(
    Array.from(
      { length: KEEP_ALIVE_CONNECTIONS },
      () => Deno.connect({ hostname: "127.0.0.1", port }),
    ),
  );
  let answered = 0;
  let lost = 0;
  let toldToClose = 0;
  const load = conns.map(async (conn) => {
    try {
      while (true) {
        const response = await exchange(conn, getHead("/api/v1/platform"));
        if (response === undefined) {
          // The request was written and the connection closed without a byte of answer.
          lost++;
          return;
        }
        answered++;
        if (response.close) {
          toldToClose++;
          return;
        }
      }
    } finally {
      conn.close();
    }
  });
  assert.ok(await waitFor(() => answered >= LOAD_BEFORE_SIGTERM, 10_000), "no load within 10 s");
  const answeredBefore = answered;
  service.kill("SIGTERM");
  await Promise.all(load);
  assert.equal(await service.exited, 0);
  assert.ok(answeredBefore > KEEP_ALIVE_CONNECTIONS, `too little load: ${answeredBefore}`);
  assert.equal(lost, 0, `${lost} requests lost, ${toldToClose} connections told to close`);
  assert.equal(toldToClose, KEEP_ALIVE_CONNECTIONS);
});
