/**
 * OpenTelemetry, tested on real exports: the service runs as a child process with `OTEL_DENO=true`
 * and Deno's exporter pointed at a small OTLP/HTTP receiver (`tests/_otlp_receiver.ts`), gets known
 * traffic, is stopped with SIGTERM, and the metrics, spans and log records that arrived are read.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  attribute,
  type DataPoint,
  pointsOf,
  type Received,
  startReceiver,
  valueOf,
} from "../_otlp_receiver.ts";
import { type ServiceProcess, startService } from "../_service_process.ts";
import {
  freePort,
  pollUntil,
  redisCli,
  redisUnavailableReason,
  startRedis,
  waitForPort,
} from "../_redis.ts";
import { DRAIN_MS, STOP_DEADLINE_MS } from "../../lib/lifecycle/stop.ts";
import { EXIT_WATCHDOG_MARGIN_MS } from "../../lib/telemetry/otel.ts";

const ROOT = new URL("../../", import.meta.url);

/** The caller of the known traffic, and the other one: neither may appear in any export. */
const CALLER = "192.0.2.77";
const OTHER = "198.51.100.23";

/**
 * The environment of a service exporting to `endpoint` in OTLP/HTTP JSON as README documents it:
 * metrics and log records, tracing off (`OTEL_DENO_TRACING=false`: a span per request costs Deno
 * most of the hot caller's throughput, deploy/README.md "What it costs"), events on stderr too.
 */
function otelEnv(endpoint: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    OTEL_DENO: "true",
    OTEL_DENO_TRACING: "false",
    OTEL_DENO_CONSOLE: "replace",
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    OTEL_EXPORTER_OTLP_TIMEOUT: "500",
    OTEL_SERVICE_NAME: "discovery-test",
    TRUSTED_PROXIES: "127.0.0.1",
    ...extra,
  };
}

/** The same with tracing on (`OTEL_DENO_TRACING=true`): a span per request. */
function tracingEnv(endpoint: string, extra: Record<string, string> = {}): Record<string, string> {
  return otelEnv(endpoint, { OTEL_DENO_TRACING: "true", ...extra });
}

/** A caller's trace context as it arrives in `traceparent` (W3C Trace Context), sampled. */
const CALLER_TRACE = { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7" };
const TRACEPARENT = `00-${CALLER_TRACE.traceId}-${CALLER_TRACE.spanId}-01`;

async function send(url: string, init: RequestInit & { caller: string }): Promise<number> {
  const headers = new Headers(init.headers);
  headers.set("x-forwarded-for", init.caller);
  const response = await fetch(url, { ...init, headers });
  await response.body?.cancel();
  return response.status;
}

/**
 * The known traffic: 70 requests of one caller at the default limit of 60, then, from another
 * caller, a preflight, an unknown path and a HEAD.
 */
async function knownTraffic(url: string): Promise<void> {
  const statuses: number[] = [];
  for (let i = 0; i < 70; i++) {
    statuses.push(await send(`${url}/api/v1/platform`, { caller: CALLER }));
  }
  assert.deepEqual(
    [statuses.filter((s) => s === 200).length, statuses.filter((s) => s === 429).length],
    [60, 10],
  );
  const preflight = await send(`${url}/api/v1/platform`, {
    method: "OPTIONS",
    caller: OTHER,
    headers: { origin: "https://example.org", "access-control-request-method": "GET" },
  });
  assert.equal(preflight, 204);
  assert.equal(await send(`${url}/no/such/path`, { caller: OTHER }), 404);
  assert.equal(await send(`${url}/api/v1/platform`, { method: "HEAD", caller: OTHER }), 200);
}

/** The total of a cumulative counter per value of `key` (the largest point of each series). */
function totals(points: DataPoint[], key: string): Record<string, number> {
  const result: Record<string, number> = {};
  for (const point of points) {
    const value = String(attribute(point.attributes, key));
    result[value] = Math.max(result[value] ?? 0, valueOf(point));
  }
  return result;
}

/** Waits until `ready` holds, at most `timeoutMs`. */
async function until(ready: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ready()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Every string of every export, for privacy checks. */
function everything(received: Received): string {
  return JSON.stringify(received.bodies);
}

/** The server spans (kind 2) of the export. */
function serverSpans(received: Received) {
  return received.spans.filter((span) => span.kind === 2);
}

/** The total count of `http.server.request.duration` per `METHOD status` (the largest point of each). */
function requestCounts(received: Received): Record<string, number> {
  const result: Record<string, number> = {};
  for (const point of pointsOf(received, "http.server.request.duration")) {
    const key = `${attribute(point.attributes, "http.request.method")} ${
      attribute(point.attributes, "http.response.status_code")
    }`;
    result[key] = Math.max(result[key] ?? 0, valueOf(point));
  }
  return result;
}

/** The log records' events, with their severity. */
function loggedEvents(received: Received) {
  return received.logs.map((log) => ({
    severity: log.severityText,
    event: JSON.parse(String(log.body?.stringValue)),
  }));
}

Deno.test("OTel as README documents it (tracing off): decisions by outcome, Deno's HTTP metrics, events as log records, exported by the exit after SIGTERM, no span and no caller address anywhere", async () => {
  const receiver = startReceiver();
  let service: ServiceProcess | undefined;
  try {
    // The default export interval (60 s) is never reached: whatever arrives, the exit flushed.
    service = await startService(otelEnv(receiver.endpoint));
    await knownTraffic(service.url);
    await service.stop();
    const { received } = receiver;
    await until(() => pointsOf(received, "ratelimit.decisions").length > 0, "decisions");

    const decisions = pointsOf(received, "ratelimit.decisions");
    assert.deepEqual(totals(decisions, "ratelimit.outcome"), { admitted: 62, limited: 10 });
    assert.ok(decisions.every((p) => attribute(p.attributes, "ratelimit.store") === "memory"));
    assert.deepEqual(requestCounts(received), {
      "GET 200": 60,
      "GET 429": 10,
      "OPTIONS 204": 1,
      "GET 404": 1,
      "HEAD 200": 1,
    });

    const logs = loggedEvents(received);
    for (const message of ["listening", "shutting down: finishing requests in flight", "stopped"]) {
      const record = logs.find((log) => log.event.message === message);
      assert.equal(record?.severity, "INFO", message);
    }
    // Under OTEL_DENO_CONSOLE=replace the service writes each event on stderr itself too.
    assert.ok(service.events.some((event) => event.message === "listening"));

    assert.equal(received.spans.length, 0, "no span with tracing off");
    assert.equal(received.requests.get("/v1/traces"), undefined);
    const all = everything(received);
    for (const address of [CALLER, OTHER, "192.0.2.0", "198.51.100.0"]) {
      assert.ok(!all.includes(address), `${address} is in an export`);
    }
  } finally {
    await service?.stop();
    await receiver.close();
  }
});

Deno.test("OTel on, RATE_LIMIT_MODE=report and an exempt range: would-be refusals are served and counted as report_refused and exempted in the decisions metric and the access log; the start warns on stderr", async () => {
  const receiver = startReceiver();
  let service: ServiceProcess | undefined;
  const exempt = "203.0.113.5";
  try {
    service = await startService(
      otelEnv(receiver.endpoint, {
        RATE_LIMIT_MODE: "report",
        RATE_LIMIT_EXEMPT: "203.0.113.0/24",
        ACCESS_LOG: "true",
      }),
      undefined,
      { stdoutEvents: true },
    );
    const statuses: number[] = [];
    for (let i = 0; i < 100; i++) {
      statuses.push(await send(`${service.url}/api/v1/platform`, { caller: CALLER }));
    }
    for (let i = 0; i < 70; i++) {
      statuses.push(await send(`${service.url}/api/v1/platform`, { caller: exempt }));
    }
    assert.deepEqual(new Set(statuses), new Set([200]));
    await service.stop();
    const { received } = receiver;
    await until(() => pointsOf(received, "ratelimit.decisions").length > 0, "decisions");
    assert.deepEqual(totals(pointsOf(received, "ratelimit.decisions"), "ratelimit.outcome"), {
      admitted: 120,
      report_refused: 40,
      exempted: 10,
    });
    const logged = (outcome: string) =>
      service!.events.filter((e) => e.path === "/api/v1/platform" && e.ratelimit === outcome);
    assert.equal(logged("report_refused").length, 40);
    assert.equal(logged("exempted").length, 10);
    const warning = service.events.find((e) =>
      e.level === "warn" && String(e.message).startsWith("RATE_LIMIT_MODE=report")
    );
    assert.ok(warning, "the report-mode warning, as a JSON event");
    assert.ok(!everything(received).includes(exempt), "no exempt address in an export");
  } finally {
    await service?.stop();
    await receiver.close();
  }
});

Deno.test("OTel with tracing on: spans named after their route, the route on Deno's duration metric, and a caller's traceparent continued", async () => {
  const receiver = startReceiver();
  let service: ServiceProcess | undefined;
  try {
    service = await startService(tracingEnv(receiver.endpoint));
    await knownTraffic(service.url);
    const traced = await send(`${service.url}/api/v1/platform`, {
      caller: OTHER,
      headers: { traceparent: TRACEPARENT },
    });
    assert.equal(traced, 200);
    await service.stop();
    const { received } = receiver;
    await until(() => serverSpans(received).length >= 74, "the spans");

    const names = serverSpans(received).map((span) => span.name);
    assert.equal(names.filter((name) => name === "GET /api/v1/platform").length, 71);
    for (const name of ["OPTIONS /api/v1/platform", "GET /*", "HEAD /api/v1/platform"]) {
      assert.ok(names.includes(name), `${name} in ${[...new Set(names)]}`);
    }
    for (const span of serverSpans(received)) {
      assert.equal(span.name.split(" ")[1], attribute(span.attributes, "http.route"));
    }
    const limited = serverSpans(received).find((span) =>
      attribute(span.attributes, "ratelimit.outcome") === "limited"
    );
    assert.equal(attribute(limited?.attributes, "ratelimit.remaining"), 0);
    // The caller's trace goes on: the request's span is the child of the caller's.
    const continued = serverSpans(received).filter((span) => span.traceId === CALLER_TRACE.traceId);
    assert.deepEqual(continued.map((span) => span.parentSpanId), [CALLER_TRACE.spanId]);

    // The runtime's duration metric is split by route too.
    const routes = new Set(
      pointsOf(received, "http.server.request.duration").map((p) =>
        attribute(p.attributes, "http.route")
      ),
    );
    assert.deepEqual([...routes].sort(), ["/*", "/api/v1/platform"]);
    assert.ok(!everything(received).includes(CALLER));
  } finally {
    await service?.stop();
    await receiver.close();
  }
});

Deno.test({
  name:
    "OTel with tracing on, Redis exact: every store call is timed by operation and outcome, as a child span of its request (in the caller's trace when it sent one); the breaker's state is observed",
  ignore: redisUnavailableReason() !== undefined,
  async fn() {
    const redis = await startRedis();
    const receiver = startReceiver();
    let service: ServiceProcess | undefined;
    try {
      service = await startService(
        tracingEnv(receiver.endpoint, {
          RATE_LIMIT_STORE: "redis",
          REDIS_URL: redis.url,
          // Every call "ok": none near the timeout on a busy machine (see the outage tests below).
          RATE_LIMIT_STORE_TIMEOUT_MS: "1000",
          OTEL_METRIC_EXPORT_INTERVAL: "300",
        }),
        undefined,
        { stdoutEvents: true },
      );
      await knownTraffic(service.url);
      const traced = await send(`${service.url}/api/v1/platform`, {
        caller: OTHER,
        headers: { traceparent: TRACEPARENT },
      });
      assert.equal(traced, 200);
      const { received } = receiver;
      await until(() => pointsOf(received, "ratelimit.breaker.state").length > 0, "breaker state");
      await service.stop();

      const calls = pointsOf(received, "ratelimit.store.duration");
      const hits = totals(
        calls.filter((p) => attribute(p.attributes, "ratelimit.operation") === "hit"),
        "ratelimit.store.outcome",
      );
      // 63 admitted and the first refusal; the 9 refusals after it are answered from memory.
      assert.deepEqual(hits, { ok: 64 });
      const peeks = calls.filter((p) => attribute(p.attributes, "ratelimit.operation") === "peek");
      // The preflight of the known traffic is answered from local state: no store call (issue 31).
      assert.equal(peeks.reduce((sum, point) => sum + valueOf(point), 0), 0);
      assert.deepEqual(
        totals(pointsOf(received, "ratelimit.decisions"), "ratelimit.outcome"),
        { admitted: 63, limited: 10 },
      );

      const servers = new Map(serverSpans(received).map((span) => [span.spanId, span]));
      const children = received.spans.filter((span) => span.name === "ratelimit.store hit");
      assert.equal(children.length, 64);
      for (const child of children) {
        assert.ok(servers.has(child.parentSpanId ?? ""), "a store call is its request's child");
      }
      // The store call of the request that came with a traceparent is in the caller's trace.
      const inTrace = children.filter((child) => child.traceId === CALLER_TRACE.traceId);
      assert.equal(inTrace.length, 1);
      assert.equal(servers.get(inTrace[0]!.parentSpanId ?? "")?.parentSpanId, CALLER_TRACE.spanId);

      const state = pointsOf(received, "ratelimit.breaker.state").filter((p) => valueOf(p) === 1);
      assert.ok(
        state.every((p) => attribute(p.attributes, "ratelimit.breaker.state") === "closed"),
      );
      assert.ok(!everything(received).includes(CALLER));
    } finally {
      await service?.stop();
      await receiver.close();
      await redis.stop();
    }
  },
});

/** The requests sent while Redis is down: enough to trip the breaker (5 failures) and stay open. */
const OUTAGE_REQUESTS = 20;

/** One GET of `url` by `caller`: its status and body. */
async function answer(url: string, caller: string): Promise<{ status: number; text: string }> {
  const response = await fetch(url, { headers: { "x-forwarded-for": caller } });
  return { status: response.status, text: await response.text() };
}

/** Whether the service's connection to the Redis on `port` is back (a client besides redis-cli). */
async function reconnected(port: number): Promise<boolean> {
  const clients = await redisCli(["-p", String(port), "client", "list"]);
  return clients.trim().split("\n").length >= 2;
}

/** Whether some export reported the breaker in `state`. */
function reported(received: Received, state: string): boolean {
  return pointsOf(received, "ratelimit.breaker.state").some((p) =>
    valueOf(p) === 1 && attribute(p.attributes, "ratelimit.breaker.state") === state
  );
}

for (const policy of ["open", "closed"] as const) {
  Deno.test({
    name:
      `OTel on, Redis exact killed and restarted, RATE_LIMIT_ON_STORE_ERROR=${policy}: the policy's answers, the breaker's state and transitions, and the failed store calls are exported`,
    ignore: redisUnavailableReason() !== undefined,
    async fn() {
      const redis = await startRedis();
      const receiver = startReceiver();
      let service: ServiceProcess | undefined;
      try {
        service = await startService(
          otelEnv(receiver.endpoint, {
            RATE_LIMIT_STORE: "redis",
            REDIS_URL: redis.url,
            RATE_LIMIT_ON_STORE_ERROR: policy,
            // A call is recorded as a timeout when it took the store timeout or longer: 100 ms (the
            // default) was once reached by a call the guard still took in time, on a busy machine.
            RATE_LIMIT_STORE_TIMEOUT_MS: "1000",
            OTEL_METRIC_EXPORT_INTERVAL: "300",
          }),
          undefined,
          { stdoutEvents: true },
        );
        const url = `${service.url}/api/v1/platform`;
        for (let i = 0; i < 3; i++) assert.equal((await answer(url, CALLER)).status, 200);

        await redis.stop();
        const down: { status: number; text: string }[] = [];
        for (let i = 0; i < OUTAGE_REQUESTS; i++) down.push(await answer(url, CALLER));
        const refused = down.filter((a) => a.status === 429);
        assert.equal(down.filter((a) => a.status === 200).length + refused.length, down.length);
        assert.equal(refused.length, policy === "open" ? 0 : OUTAGE_REQUESTS);
        assert.ok(refused.every((a) => a.text.includes("rate_limit_unavailable")));
        const { received } = receiver;
        await until(() => reported(received, "open"), "the breaker reported open");

        // Back: once the service has reconnected and the probe interval (250 ms) is over, the
        // next request is the probe; it and the ones after it are the store's answers.
        await redis.start();
        await pollUntil(() => reconnected(redis.port), 10_000, "the service reconnected");
        await new Promise((resolve) => setTimeout(resolve, 400));
        for (let i = 0; i < 3; i++) assert.equal((await answer(url, CALLER)).status, 200);
        // Read from the periodic exports, not the exit's: an exit after SIGTERM was once seen held
        // for minutes with the collector's connection open (the test then kills the service).
        const decided = () => pointsOf(received, "ratelimit.decisions");
        await until(() => totals(decided(), "ratelimit.outcome").admitted === 6, "admitted again");
        await until(
          () =>
            totals(
              pointsOf(received, "ratelimit.breaker.transitions"),
              "ratelimit.breaker.transition",
            )
              .closed === 1,
          "the closed transition",
        );
        await new Promise((resolve) => setTimeout(resolve, 400));

        assert.deepEqual(
          totals(pointsOf(received, "ratelimit.decisions"), "ratelimit.outcome"),
          { admitted: 6, [`failure_policy_${policy}`]: OUTAGE_REQUESTS },
        );
        assert.deepEqual(
          totals(
            pointsOf(received, "ratelimit.breaker.transitions"),
            "ratelimit.breaker.transition",
          ),
          { opened: 1, closed: 1 },
        );
        const states = pointsOf(received, "ratelimit.breaker.state");
        const last = states.reduce((a, b) =>
          BigInt(b.timeUnixNano ?? 0) > BigInt(a.timeUnixNano ?? 0) ? b : a
        );
        const lastTime = last.timeUnixNano;
        const now = states.filter((p) => p.timeUnixNano === lastTime && valueOf(p) === 1);
        assert.deepEqual(now.map((p) => attribute(p.attributes, "ratelimit.breaker.state")), [
          "closed",
        ]);

        // The calls that reached the store while it was down: at least the 5 that tripped it.
        const hits = totals(
          pointsOf(received, "ratelimit.store.duration").filter((p) =>
            attribute(p.attributes, "ratelimit.operation") === "hit"
          ),
          "ratelimit.store.outcome",
        );
        assert.equal(hits.ok, 6);
        assert.ok((hits.error ?? 0) + (hits.timeout ?? 0) >= 5, JSON.stringify(hits));
        assert.deepEqual(
          Object.keys(hits).filter((o) => !["ok", "error", "timeout"].includes(o)),
          [],
        );
      } finally {
        service?.kill("SIGKILL");
        await service?.exited;
        await receiver.close();
        await redis.stop();
      }
    },
  });
}

Deno.test({
  name:
    "OTel on, Redis exact killed, RATE_LIMIT_ON_STORE_ERROR=closed, report mode, an exempt range and a deny list: the policy's answers are counted as failure_policy_closed whoever they served, and denied 403s as denied",
  ignore: redisUnavailableReason() !== undefined,
  async fn() {
    const redis = await startRedis();
    const receiver = startReceiver();
    let service: ServiceProcess | undefined;
    const exempt = "203.0.113.5";
    const denied = "198.51.100.9";
    try {
      service = await startService(
        otelEnv(receiver.endpoint, {
          RATE_LIMIT_STORE: "redis",
          REDIS_URL: redis.url,
          RATE_LIMIT_ON_STORE_ERROR: "closed",
          RATE_LIMIT_MODE: "report",
          RATE_LIMIT_EXEMPT: "203.0.113.0/24",
          RATE_LIMIT_DENY: "198.51.100.0/24",
          RATE_LIMIT_STORE_TIMEOUT_MS: "1000",
          OTEL_METRIC_EXPORT_INTERVAL: "300",
        }),
        undefined,
        { stdoutEvents: true },
      );
      const url = `${service.url}/api/v1/platform`;
      for (let i = 0; i < 3; i++) assert.equal((await answer(url, CALLER)).status, 200);
      for (let i = 0; i < 2; i++) assert.equal((await answer(url, denied)).status, 403);
      await redis.stop();
      // Refused by the closed policy, and served: report mode serves anyone's would-be refusal,
      // RATE_LIMIT_EXEMPT an exempt caller's. Either way an outage's answer.
      for (let i = 0; i < OUTAGE_REQUESTS; i++) {
        assert.equal((await answer(url, CALLER)).status, 200);
        assert.equal((await answer(url, exempt)).status, 200);
      }
      const { received } = receiver;
      const expected = { admitted: 3, denied: 2, failure_policy_closed: 2 * OUTAGE_REQUESTS };
      const counted = () => totals(pointsOf(received, "ratelimit.decisions"), "ratelimit.outcome");
      const sum = (totals: Record<string, number>) =>
        Object.values(totals).reduce((a, b) => a + b, 0);
      // Every request's decision exported: each is added at most a second after it and exported
      // every 300 ms (the denied ones too, unless they are not counted: then compare what came).
      await until(() => sum(counted()) >= 3 + 2 * OUTAGE_REQUESTS, "the decisions exported");
      const deadline = Date.now() + 2_000;
      while (sum(counted()) < sum(expected) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.deepEqual(counted(), expected);
      assert.ok(!everything(received).includes(exempt), "no exempt address in an export");
      assert.ok(!everything(received).includes(denied), "no denied address in an export");
    } finally {
      service?.kill("SIGKILL");
      await service?.exited;
      await receiver.close();
      await redis.stop();
    }
  },
});

Deno.test("OTel as documented with the default http/protobuf: metrics and logs arrive (counted, not decoded), no traces", async () => {
  const receiver = startReceiver();
  let service: ServiceProcess | undefined;
  try {
    const env = otelEnv(receiver.endpoint);
    delete env.OTEL_EXPORTER_OTLP_PROTOCOL;
    service = await startService(env, undefined, { stdoutEvents: true });
    for (let i = 0; i < 5; i++) {
      assert.equal(await send(`${service.url}/api/v1/platform`, { caller: CALLER }), 200);
    }
    await service.stop();
    for (const path of ["/v1/metrics", "/v1/logs"]) {
      const seen = receiver.received.requests.get(path);
      assert.ok(seen !== undefined && seen.count > 0 && seen.bytes > 0, `nothing on ${path}`);
    }
    assert.equal(receiver.received.requests.get("/v1/traces"), undefined, "tracing is off");
    assert.deepEqual(receiver.received.bodies, [], "protobuf, not JSON");
  } finally {
    await service?.stop();
    await receiver.close();
  }
});

/**
 * Sends 20 requests 25 ms apart and answers the median time, in ms. An export on the request path
 * (each bounded by a timeout of 500 ms, every 100 ms) would slow most of them; one slow request is
 * the machine's (the slowest of 20 once took 900 ms on a machine shared with the parallel suite).
 */
async function medianOf20(url: string): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < 20; i++) {
    const started = performance.now();
    await send(`${url}/api/v1/platform`, { caller: CALLER });
    times.push(performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return times.sort((a, b) => a - b)[10]!;
}

// A collector that accepts and never answers, while periodic exports are failing, holds Deno 2.9.6's
// exit now and then until it is killed (deploy/README.md, "Shutdown"): the service's watchdog
// (lib/telemetry/exit_watchdog.ts) then kills the process itself, saying so, once the exports' own
// bound (3 x 500 ms) and its margin are over.
const COLLECTORS = [
  {
    name: "down (nothing listens)",
    delayMs: undefined,
    interval: "100",
    limitMs: STOP_DEADLINE_MS,
  },
  { name: "slow (never answers)", delayMs: 60_000, interval: "60000", limitMs: STOP_DEADLINE_MS },
  {
    name: "slow (never answers) while periodic exports time out",
    delayMs: 60_000,
    interval: "100",
    // The drain, the exports' bound and the watchdog's margin, and a second for a busy machine.
    limitMs: DRAIN_MS + 3 * 500 + EXIT_WATCHDOG_MARGIN_MS + 1000,
  },
];
for (const collector of COLLECTORS) {
  Deno.test(`OTel on, a collector that is ${collector.name}: requests are not slowed, and the exit with its last exports ends within its bound`, async () => {
    const receiver = startReceiver({
      ...(collector.delayMs ? { delayMs: collector.delayMs } : {}),
    });
    const endpoint = receiver.endpoint;
    if (collector.delayMs === undefined) await receiver.close();
    let service: ServiceProcess | undefined;
    try {
      service = await startService(
        otelEnv(endpoint, { OTEL_METRIC_EXPORT_INTERVAL: collector.interval }),
      );
      const median = await medianOf20(service.url);
      assert.ok(median < 100, `the median request took ${median} ms while exports failed`);
      const started = performance.now();
      await service.stop();
      const exitMs = performance.now() - started;
      assert.ok(exitMs < collector.limitMs, `exit took ${exitMs} ms`);
      // Either the exit ended by itself, or the watchdog ended it and said why.
      const code = await service.exited;
      const last = String(service.events.at(-1)?.message);
      assert.ok(
        code === 0 || (code === 137 && last.startsWith("the exit's last OpenTelemetry exports")),
        `exit code ${code} after ${last}`,
      );
      assert.ok(
        !service.events.some((e) => String(e.message).startsWith("OTEL_EXPORTER_OTLP_TIMEOUT")),
        "no warning when the timeout is bounded",
      );
      if (collector.delayMs !== undefined) {
        assert.ok(receiver.received.requests.size > 0, "the exports were sent");
      }
    } finally {
      await service?.stop();
      if (collector.delayMs !== undefined) await receiver.close();
    }
  });
}

Deno.test("OTel on, a collector that never answers while exports time out: a start-up failure (KV_PATH in no folder) ends in its sentence within the exit's bound", async () => {
  const receiver = startReceiver({ delayMs: 60_000 });
  try {
    const dir = await Deno.makeTempDir();
    const started = performance.now();
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--config",
        new URL("deno.json", ROOT).pathname,
        "--unstable-net",
        "--allow-net",
        "--allow-read",
        "--allow-write",
        "--allow-env",
        new URL("main.ts", ROOT).pathname,
        "--listen",
      ],
      env: {
        PORT: "0",
        HOSTNAME: "127.0.0.1",
        PUBLIC_BASE_URL: "http://127.0.0.1",
        NO_COLOR: "1",
        ...otelEnv(receiver.endpoint, {
          OTEL_METRIC_EXPORT_INTERVAL: "100",
          RATE_LIMIT_STORE: "kv",
          KV_PATH: `${dir}/no-such-folder/limits.sqlite3`,
        }),
      },
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    // Unbounded, the exit would be killed here, and the bound below fails.
    const killer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    const [stderr, status] = await Promise.all([new Response(child.stderr).text(), child.status]);
    clearTimeout(killer);
    const exitMs = performance.now() - started;
    await Deno.remove(dir, { recursive: true });
    assert.match(stderr, /KV_PATH/);
    assert.ok(
      status.code === 1 ||
        (status.code === 137 && stderr.includes("the exit's last OpenTelemetry exports")),
      `exit ${status.code}: ${stderr}`,
    );
    // Start-up itself (a busy machine), the exports' bound (3 x 500 ms) and the watchdog's margin.
    assert.ok(
      exitMs < 5_000 + 3 * 500 + EXIT_WATCHDOG_MARGIN_MS,
      `the failed start took ${exitMs} ms`,
    );
  } finally {
    await receiver.close();
  }
});

Deno.test("OTel on without OTEL_EXPORTER_OTLP_TIMEOUT: start-up warns that a slow collector could hold the exit", async () => {
  const receiver = startReceiver();
  let service: ServiceProcess | undefined;
  try {
    const env = otelEnv(receiver.endpoint);
    delete env.OTEL_EXPORTER_OTLP_TIMEOUT;
    service = await startService(env, undefined, { stdoutEvents: true });
    const warning = service.events.find((event) =>
      String(event.message).startsWith("OTEL_EXPORTER_OTLP_TIMEOUT")
    );
    assert.equal(warning?.level, "warn");
    assert.equal(warning?.exitFlushBoundMs, 30_000);
  } finally {
    await service?.stop();
    await receiver.close();
  }
});

/**
 * A copy of the service (main.ts, lib/, static/) whose import map puts a tripwire in front of
 * `@opentelemetry/api` (a configuration beside the real project would not be the one Deno uses).
 */
async function tripwireCopy(): Promise<{ root: string; config: string }> {
  const root = await Deno.makeTempDir();
  const copy = new Deno.Command("cp", {
    args: ["-r", "main.ts", "lib", "static", root],
    cwd: ROOT,
  });
  assert.ok((await copy.output()).success);
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT)));
  config.imports["@opentelemetry/api"] = new URL("tests/_otel_tripwire.ts", ROOT).href;
  await Deno.writeTextFile(`${root}/deno.json`, JSON.stringify(config));
  return { root, config: `${root}/deno.json` };
}

Deno.test("@opentelemetry/api is not loaded with OTEL_DENO unset, and is with OTEL_DENO=true", async () => {
  const copy = await tripwireCopy();
  const receiver = startReceiver();
  try {
    for (const on of [false, true]) {
      // Under capture, the tripwire's console.error is printed on stderr as well as exported.
      const env = on ? otelEnv(receiver.endpoint, { OTEL_DENO_CONSOLE: "capture" }) : {};
      const service = await startService(env, undefined, { copy, stdoutEvents: on });
      try {
        assert.equal(await send(`${service.url}/api/v1/platform`, { caller: CALLER }), 200);
      } finally {
        await service.stop();
      }
      const loaded = service.events.some((event) => event.tripwire === "@opentelemetry/api");
      assert.equal(loaded, on, on ? "loaded when on" : "not loaded when off");
    }
  } finally {
    await receiver.close();
    await Deno.remove(copy.root, { recursive: true });
  }
});

Deno.test("deno serve --parallel: every worker's decisions arrive and add up", async () => {
  const receiver = startReceiver();
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "serve",
      "--parallel",
      "--config",
      new URL("deno.json", ROOT).pathname,
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "--allow-net",
      "--allow-read",
      "--allow-env",
      new URL("main.ts", ROOT).pathname,
    ],
    env: { ...otelEnv(receiver.endpoint), DENO_JOBS: "2", ACCESS_LOG: "false" },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  try {
    await waitForPort(port, 20_000);
    // A new connection per request, so that the kernel spreads them over the workers. The port
    // answers once one worker serves: the other may still be starting when SIGTERM comes, the
    // case lib/server/serve_stop.ts is for.
    const client = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
    const statuses = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        fetch(`http://127.0.0.1:${port}/api/v1/platform`, {
          client,
          headers: { "x-forwarded-for": `192.0.2.${i + 1}` },
          signal: AbortSignal.timeout(10_000),
        }).then(async (response) => (await response.body?.cancel(), response.status))),
    );
    client.close();
    assert.deepEqual(new Set(statuses), new Set([200]));
    child.kill("SIGTERM");
    // Bounded: a worker that does not exit fails the test, with what the process said, instead
    // of holding the suite.
    let exitTimer: ReturnType<typeof setTimeout> | undefined;
    const status = await Promise.race([
      child.status,
      new Promise<undefined>((resolve) => exitTimer = setTimeout(() => resolve(undefined), 15_000)),
    ]);
    clearTimeout(exitTimer);
    if (status === undefined) child.kill("SIGKILL");
    assert.ok(
      status?.code === 0,
      `deno serve --parallel ${
        status ? `exited ${status.code}` : "did not exit within 15 s"
      } after SIGTERM; it said:\n${await stderr}`,
    );
    const decisions = pointsOf(receiver.received, "ratelimit.decisions");
    assert.deepEqual(totals(decisions, "ratelimit.outcome"), { admitted: 40 });
  } finally {
    try {
      child.kill("SIGKILL");
    } catch { /* exited */ }
    await child.status;
    await stderr;
    await receiver.close();
  }
});

Deno.test("OTel on, Deno KV local-first: each sync is timed with its batch size, and the time since the last good one is observed", async () => {
  const receiver = startReceiver();
  const dir = await Deno.makeTempDir();
  let service: ServiceProcess | undefined;
  try {
    service = await startService(
      otelEnv(receiver.endpoint, {
        RATE_LIMIT_STORE: "kv",
        RATE_LIMIT_CONSISTENCY: "local-first",
        KV_PATH: `${dir}/limits.sqlite3`,
        OTEL_METRIC_EXPORT_INTERVAL: "300",
      }),
      undefined,
      { stdoutEvents: true },
    );
    for (let i = 0; i < 5; i++) {
      assert.equal(
        await send(`${service.url}/api/v1/platform`, { caller: `192.0.2.${i + 1}` }),
        200,
      );
    }
    const { received } = receiver;
    await until(() => pointsOf(received, "ratelimit.sync.age").length > 0, "sync age");
    await until(() => pointsOf(received, "ratelimit.sync.duration").length > 0, "sync duration");
    await service.stop();
    const syncs = pointsOf(received, "ratelimit.sync.duration");
    assert.ok(syncs.every((p) => attribute(p.attributes, "ratelimit.sync.outcome") === "ok"));
    assert.ok(Math.max(...syncs.map(valueOf)) >= 1);
    const sizes = pointsOf(received, "ratelimit.sync.batch.size");
    assert.ok(sizes.some((p) => Number(p.sum) >= 5), "the five callers were carried");
    assert.ok(pointsOf(received, "ratelimit.sync.age").every((p) => valueOf(p) < 60));
    assert.deepEqual(
      totals(pointsOf(received, "ratelimit.decisions"), "ratelimit.outcome"),
      { admitted: 5 },
    );
  } finally {
    await service?.stop();
    await receiver.close();
    await Deno.remove(dir, { recursive: true });
  }
});
