/**
 * One clock for a shared store: real service processes sharing a real Redis, some of them under
 * libfaketime (`FAKETIME=+30s`, `-30s`: Deno's `Date.now` follows it), in both consistency modes.
 * A caller sends the limit to one instance and, 31 s later, as much again to another whose clock
 * disagrees by 30 s: the store's clock decides, so the second instance admits nothing more (exact)
 * or at most its first request (local-first: an instance that has not yet seen the caller knows
 * nothing of the others until its first sync, the bound's cap term). The instances whose clocks are
 * off say so, once, on stderr and in `ratelimit.clock.offset`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { redisUnavailableReason, startRedis } from "./_redis.ts";
import {
  admitted,
  faketimeUnavailableReason,
  request,
  resetOf,
  sequential,
  type ServiceProcess,
  startService,
} from "./_service_process.ts";
import { pointsOf, type Received, startReceiver } from "./_otlp_receiver.ts";

const LIMIT = 60;
/** The wait between the two bursts: past the skew, inside the window. */
const LATER_MS = 31_000;

const skip = redisUnavailableReason() ?? faketimeUnavailableReason();

type Mode = "exact" | "local-first";

/** The warning events about this instance's clock. */
const clockWarnings = (service: ServiceProcess) =>
  service.events.filter((e) => e.level === "warn" && /clock is/.test(String(e.message)));

async function until(check: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

Deno.test({
  name: `instances whose clocks are 30 s apart share one limit on Redis, exact and local-first${
    skip ? ` (ignored: ${skip})` : ""
  }`,
  ignore: skip !== undefined,
  async fn() {
    const redis = await startRedis();
    const receiver = startReceiver();
    const received: Received = receiver.received;
    const services: ServiceProcess[] = [];
    try {
      const envOf = (mode: Mode) => ({
        RATE_LIMIT: String(LIMIT),
        RATE_LIMIT_WINDOW_SECONDS: "60",
        RATE_LIMIT_STORE: "redis",
        REDIS_URL: redis.url,
        RATE_LIMIT_CONSISTENCY: mode,
        RATE_LIMIT_SYNC_MS: "50",
        TRUSTED_PROXIES: "127.0.0.1",
        // Generous: on a busy test machine a slow answer must not be mistaken for an outage.
        RATE_LIMIT_STORE_TIMEOUT_MS: "5000",
        RATE_LIMIT_ON_STORE_ERROR: "closed",
      });
      const otel = {
        OTEL_DENO: "true",
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
        OTEL_EXPORTER_OTLP_TIMEOUT: "500",
        OTEL_METRIC_EXPORT_INTERVAL: "300",
        OTEL_SERVICE_NAME: "discovery-clock-test",
      };
      // Per mode: one instance on the machine's clock, one 30 s ahead, one 30 s behind. The exact
      // instance ahead exports its telemetry.
      const started = await Promise.all((["exact", "local-first"] as const).flatMap((mode) => [
        startService(envOf(mode)),
        mode === "exact"
          ? startService({ ...envOf(mode), ...otel }, undefined, {
            faketime: "+30s",
            stdoutEvents: true,
          })
          : startService(envOf(mode), undefined, { faketime: "+30s" }),
        startService(envOf(mode), undefined, { faketime: "-30s" }),
      ]));
      services.push(...started);
      const [exactOn, exactAhead, exactBehind, firstOn, firstAhead, firstBehind] = started as [
        ServiceProcess,
        ServiceProcess,
        ServiceProcess,
        ServiceProcess,
        ServiceProcess,
        ServiceProcess,
      ];
      const scenarios = [
        // The second instance's clock 30 s ahead (the issue's measurement: 120 admitted).
        { name: "exact, +30 s", first: exactOn, second: exactAhead, ip: "192.0.2.1" },
        // The mirror: the first instance's clock 30 s behind.
        { name: "exact, -30 s", first: exactBehind, second: exactOn, ip: "192.0.2.2" },
        { name: "local-first, +30 s", first: firstOn, second: firstAhead, ip: "192.0.2.3" },
        { name: "local-first, -30 s", first: firstBehind, second: firstOn, ip: "192.0.2.4" },
      ];

      const firsts = await Promise.all(
        scenarios.map((s) => sequential(s.first.url, LIMIT, s.ip)),
      );
      for (const [i, s] of scenarios.entries()) {
        assert.equal(admitted(firsts[i]!), LIMIT, `${s.name}: the first burst is admitted`);
      }
      await new Promise((resolve) => setTimeout(resolve, LATER_MS));
      const seconds = await Promise.all(scenarios.map(async (s) => {
        // One request first, then the rest once the second instance has synced (local-first).
        const one = await request(s.second.url, s.ip);
        await new Promise((resolve) => setTimeout(resolve, 500));
        return [one, ...await sequential(s.second.url, LIMIT - 1, s.ip)];
      }));
      for (const [i, s] of scenarios.entries()) {
        const total = LIMIT + admitted(seconds[i]!);
        if (s.name.startsWith("exact")) {
          assert.equal(total, LIMIT, `${s.name}: ${total} admitted, at most the limit`);
        } else {
          // The bound's cap term: the second instance's first request, before it has synced.
          assert.ok(total <= LIMIT + 1, `${s.name}: ${total} admitted, bound ${LIMIT + 1}`);
        }
        // The headers count down by the store's clock: about 60 - 31 s left, whoever answers.
        const refused = seconds[i]!.filter((o) => o.status === 429);
        assert.ok(refused.length >= LIMIT - 1, `${s.name}: refused`);
        for (const o of refused) {
          const t = resetOf(o);
          assert.ok(t >= 20 && t <= 30, `${s.name}: t=${t} (${o.rateLimit})`);
        }
      }

      // One warning per instance whose clock is off, naming the offset; none on the machine's.
      for (const service of [exactAhead, exactBehind, firstAhead, firstBehind]) {
        await until(() => clockWarnings(service).length > 0, "the clock warning");
      }
      for (
        const [service, sign] of [
          [exactAhead, -1],
          [exactBehind, 1],
          [firstAhead, -1],
          [firstBehind, 1],
        ] as const
      ) {
        const warnings = clockWarnings(service);
        assert.equal(warnings.length, 1, JSON.stringify(warnings));
        const offsetMs = Number(warnings[0]!.offsetMs);
        assert.ok(Math.abs(offsetMs - sign * 30_000) < 1000, `offset ${offsetMs} ms`);
      }
      for (const service of [exactOn, firstOn]) assert.deepEqual(clockWarnings(service), []);

      // The metric: the store's clock minus the instance's, in seconds.
      await until(
        () => pointsOf(received, "ratelimit.clock.offset").length > 0,
        "ratelimit.clock.offset",
      );
      const offset = pointsOf(received, "ratelimit.clock.offset").at(-1)!;
      const value = Number(offset.asDouble ?? offset.asInt);
      assert.ok(Math.abs(value + 30) < 1, `ratelimit.clock.offset = ${value} s`);
    } finally {
      // Not what this test is about: Deno 2.9.6 with OpenTelemetry on sometimes never returns from
      // `Deno.exit` after the service said "stopped" (2 of 3 CI runs held this teardown 45 s); such
      // a process is killed 5 s after "stopped" and said so. That every service exits on SIGTERM is
      // tested in tests/main_test.ts and tests/start_test.ts.
      await Promise.all(services.map((s) =>
        s.stop().catch((error) => {
          // deno-lint-ignore no-console
          console.log(`teardown: ${error instanceof Error ? error.message : error}`);
        })
      ));
      await receiver.close();
      await redis.stop();
    }
  },
});
