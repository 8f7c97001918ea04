/**
 * The operator port (`HEALTH_PORT`, `lib/lifecycle/health.ts`) on the real entries, Deno's
 * (`main.ts --listen`, as `deno task start` runs it) and Node's (`lib/node/main.ts` on Node 24, as
 * `npm start` runs it), each a process on ephemeral loopback ports:
 *
 * - `/livez` and `/readyz` answer 200 there (HEAD too; other methods 405, other paths 404), and
 *   300 probes sent as a caller leave that caller 60 of its next 100 on the public port, whose own
 *   `/readyz` is not 200;
 * - at SIGTERM `/readyz` turns 503 before the drain ends while `/livez` still answers, and the
 *   process exits 0;
 * - a SIGTERM the moment the first "listening" line is written (the operator port's, before the
 *   public port's) meets the graceful stop, not the runtime's default.
 *
 * @module
 */

import assert from "node:assert/strict";
import { ensureNodeModules, nodeBinary } from "../_node.ts";
import {
  admitted,
  sequential,
  type ServiceProcess,
  type StartOptions,
  startService,
} from "../_service_process.ts";

await ensureNodeModules();
const NODE_24 = await nodeBinary(24);

/** Both entries, by name, with the options that start each. */
const RUNTIMES: ReadonlyArray<[string, StartOptions]> = [["Deno", {}], ["Node 24", {
  node: NODE_24,
}]];

/** Two free ports; the service trusts 127.0.0.1's `X-Forwarded-For`, so callers are distinct. */
const ENV = { HEALTH_PORT: "0", TRUSTED_PROXIES: "127.0.0.1" };

/** The caller whose budget the probes must not touch (RATE_LIMIT's default: 60 a minute). */
const CALLER = "203.0.113.9";

/** The operator port's URL, from its `health port listening` event. */
function healthUrl(service: ServiceProcess): string {
  const listening = service.events.find((event) => event.message === "health port listening");
  assert.ok(listening, `no "health port listening" event: ${JSON.stringify(service.events)}`);
  return String(listening.address).replace(/\/$/, "");
}

/** `method url` as {@linkcode CALLER}: its status, body text and `Allow`. */
async function probe(url: string, method = "GET") {
  const response = await fetch(url, { method, headers: { "x-forwarded-for": CALLER } });
  return {
    status: response.status,
    body: await response.text(),
    allow: response.headers.get("allow"),
  };
}

/** The stop's first event (`lib/lifecycle/stop.ts`). */
const SHUTTING_DOWN = "shutting down: finishing requests in flight";

/** Resolves once `service` has written an event with `message`; fails after `timeoutMs`. */
async function eventSeen(service: ServiceProcess, message: string, timeoutMs = 10_000) {
  const started = Date.now();
  while (!service.events.some((event) => event.message === message)) {
    assert.ok(Date.now() - started < timeoutMs, `no "${message}" within ${timeoutMs} ms`);
    // The events array is filled as stderr is read: a short poll of it, not a guess at timing.
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

for (const [runtime, options] of RUNTIMES) {
  Deno.test(`${runtime}: HEALTH_PORT answers /livez and /readyz, and probes are never counted`, async () => {
    const service = await startService(ENV, 20_000, options);
    try {
      const health = healthUrl(service);
      assert.notEqual(new URL(health).port, new URL(service.url).port);
      assert.deepEqual(await probe(`${health}/livez`), {
        status: 200,
        body: '{"status":"live"}',
        allow: null,
      });
      assert.deepEqual(await probe(`${health}/readyz?verbose`), {
        status: 200,
        body: '{"status":"ready","phase":"serving"}',
        allow: null,
      });
      assert.deepEqual(await probe(`${health}/readyz`, "HEAD"), {
        status: 200,
        body: "",
        allow: null,
      });
      const refused = await probe(`${health}/readyz`, "POST");
      assert.equal(refused.status, 405);
      assert.equal(refused.allow, "GET, HEAD");
      assert.equal((await probe(`${health}/api/v1/platform`)).status, 404);
      for (let i = 0; i < 300; i++) {
        const { status } = await probe(`${health}/${i % 2 === 0 ? "livez" : "readyz"}`);
        assert.equal(status, 200, `probe ${i}`);
      }
      // The public port: its /readyz and /livez are unknown paths there, counted like any other.
      assert.notEqual((await probe(`${service.url}/readyz`)).status, 200);
      assert.notEqual((await probe(`${service.url}/livez`)).status, 200);
      assert.equal(admitted(await sequential(service.url, 100, "203.0.113.10")), 60);
      // Two of the caller's 60 went on the public port's /readyz and /livez just above.
      assert.equal(admitted(await sequential(service.url, 100, CALLER)), 58);
    } finally {
      await service.stop();
    }
  });

  Deno.test(`${runtime}: at SIGTERM /readyz turns 503 before the drain ends, /livez still 200`, async () => {
    const service = await startService(ENV, 20_000, options);
    const health = healthUrl(service);
    service.kill("SIGTERM");
    await eventSeen(service, SHUTTING_DOWN);
    const [ready, live] = [await probe(`${health}/readyz`), await probe(`${health}/livez`)];
    // Asked before "stopped": the drain (DRAIN_MS, 1 s) has not ended.
    const stoppedBefore = service.events.some((event) => event.message === "stopped");
    assert.deepEqual(ready, {
      status: 503,
      body: '{"status":"not_ready","phase":"stopping"}',
      allow: null,
    });
    assert.equal(live.status, 200);
    assert.equal(stoppedBefore, false, "answered before the drain ended");
    assert.equal(await service.exited, 0);
  });

  Deno.test(`${runtime}: a SIGTERM as the operator port says it listens meets the graceful stop`, async () => {
    let sent = false;
    const service = await startService(ENV, 20_000, {
      ...options,
      onEvent: (event, kill) => {
        if (event.message === "health port listening" && !sent) {
          sent = true;
          kill("SIGTERM");
        }
      },
    });
    assert.equal(await service.exited, 0, "exit 0, not killed by the signal");
    const messages = service.events.map((event) => event.message);
    assert.ok(messages.includes(SHUTTING_DOWN), messages.join(" | "));
    assert.ok(messages.includes("stopped"), messages.join(" | "));
  });
}
