/**
 * A clock that jumps: real service processes under libfaketime whose wall clock is stepped +30 s or
 * −30 s in the middle of a caller's window (the offset is read from a file at run time; the
 * monotonic clock is left alone, as NTP stepping the clock or a VM resumed leave it), with the memory
 * store, Deno KV exact and Redis exact. A step forward must not hand the caller a fresh window early,
 * nor a step back keep refusing it past its window.
 *
 * @module
 */

import assert from "node:assert/strict";
import { redisUnavailableReason, startRedis } from "./_redis.ts";
import {
  faketimeUnavailableReason,
  LIBFAKETIME,
  type Outcome,
  request,
  resetOf,
  type ServiceProcess,
  startService,
} from "./_service_process.ts";

const LIMIT = 5;
const WINDOW_S = 40;
/** When the clocks are stepped, after the caller's first burst (s). */
const STEP_AT_S = 5;
/** When a step forward of 30 s would have ended the window by the wall clock, but not in truth (s). */
const EARLY_S = 32;
/** When the window is over in truth, where a step back of 30 s would still refuse (s). */
const LATE_S = WINDOW_S + 4;

const skip = faketimeUnavailableReason();
const noRedis = redisUnavailableReason();

/** The wall clock the service reads, from its `Date` header (s). */
async function serviceWallS(url: string): Promise<number> {
  const response = await fetch(`${url}/api/v1/platform`, {
    headers: { "x-forwarded-for": "198.51.100.1" },
  });
  await response.body?.cancel();
  return Date.parse(response.headers.get("date")!) / 1000;
}

/** Waits until each scenario's service reads its wall clock stepped by the scenario's step. */
async function checkStepped<S extends { name: string; step: number }>(
  which: readonly S[],
  services: readonly ServiceProcess[],
  all: readonly S[],
): Promise<void> {
  for (const s of which) {
    const url = services[all.indexOf(s)]!.url;
    const deadline = Date.now() + 5000;
    while (Math.abs(await serviceWallS(url) - Date.now() / 1000 - s.step) > 2) {
      assert.ok(Date.now() < deadline, `${s.name}: the service's clock was not stepped`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

const sleepUntil = (start: number, seconds: number) =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, start + seconds * 1000 - Date.now())));

Deno.test({
  name:
    `a step of an instance's wall clock mid-window moves no caller's window: memory, Deno KV and Redis, exact and local-first${
      skip ? ` (ignored: ${skip})` : ""
    }`,
  ignore: skip !== undefined,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "clock-step-" });
    const redis = noRedis === undefined ? await startRedis() : undefined;
    if (noRedis !== undefined) {
      // deno-lint-ignore no-console
      console.log(`Redis exact not run: ${noRedis}`);
    }
    const services: ServiceProcess[] = [];
    try {
      const stores: Array<[string, Record<string, string>]> = [
        ["memory", { RATE_LIMIT_STORE: "memory" }],
        ["kv", { RATE_LIMIT_STORE: "kv", RATE_LIMIT_CONSISTENCY: "exact" }],
        ["kv-local-first", { RATE_LIMIT_STORE: "kv", RATE_LIMIT_CONSISTENCY: "local-first" }],
        ...(redis === undefined ? [] : [
          [
            "redis",
            { RATE_LIMIT_STORE: "redis", REDIS_URL: redis.url, RATE_LIMIT_CONSISTENCY: "exact" },
          ],
          [
            "redis-local-first",
            {
              RATE_LIMIT_STORE: "redis",
              REDIS_URL: redis.url,
              RATE_LIMIT_CONSISTENCY: "local-first",
            },
          ],
        ] as Array<[string, Record<string, string>]>),
      ];
      const scenarios = stores.flatMap(([store, env]) =>
        ([30, -30] as const).map((step, i) => ({
          name: `${store}, ${step > 0 ? "+" : ""}${step} s`,
          step,
          env,
          file: `${dir}/${store}${step}.faketime`,
          kv: `${dir}/${store}${step}.sqlite3`,
          ip: `192.0.2.${stores.findIndex(([s]) => s === store) * 2 + i + 1}`,
        }))
      );
      for (const s of scenarios) await Deno.writeTextFile(s.file, "+0\n");
      const started = await Promise.all(scenarios.map((s) =>
        startService({
          RATE_LIMIT: String(LIMIT),
          RATE_LIMIT_WINDOW_SECONDS: String(WINDOW_S),
          TRUSTED_PROXIES: "127.0.0.1",
          RATE_LIMIT_STORE_TIMEOUT_MS: "5000",
          RATE_LIMIT_ON_STORE_ERROR: "closed",
          ...(s.env.RATE_LIMIT_STORE === "kv" ? { KV_PATH: s.kv } : {}),
          ...s.env,
          // The wall clock's offset is read from the file (every second at most): only it steps.
          LD_PRELOAD: LIBFAKETIME,
          FAKETIME_TIMESTAMP_FILE: s.file,
          FAKETIME_CACHE_DURATION: "1",
          DONT_FAKE_MONOTONIC: "1",
        })
      ));
      services.push(...started);

      const t0 = Date.now();
      const firsts = await Promise.all(scenarios.map(async (s, i) => {
        const outcomes: Outcome[] = [];
        for (let n = 0; n < LIMIT; n++) outcomes.push(await request(started[i]!.url, s.ip));
        return outcomes;
      }));
      for (const [i, s] of scenarios.entries()) {
        assert.deepEqual(firsts[i]!.map((o) => o.status), Array(LIMIT).fill(200), s.name);
      }

      await sleepUntil(t0, STEP_AT_S);
      for (const s of scenarios) {
        await Deno.writeTextFile(s.file, `${s.step > 0 ? "+" : ""}${s.step}s\n`);
      }
      // The step forward has reached the services (their Date header), or the test proves nothing.
      // Their Date header is cached until the next second by the wall clock, so a step back shows
      // only 30 s later: that one is checked at the end.
      await checkStepped(scenarios.filter((s) => s.step > 0), started, scenarios);

      // A step forward: by the wall clock the window is over, in truth 8 s are left.
      await sleepUntil(t0, EARLY_S);
      const early = await Promise.all(scenarios.map((s, i) => request(started[i]!.url, s.ip)));
      // Every scenario is checked before the test fails, so that its message lists them all.
      const wrong: string[] = [];
      for (const [i, s] of scenarios.entries()) {
        const o = early[i]!;
        const t = resetOf(o);
        if (o.status !== 429 || t < 5 || t > 10) {
          wrong.push(`${s.name}: ${o.status} ${EARLY_S} s into the window (${o.rateLimit})`);
        }
      }

      // A step back: by the wall clock 26 s are left, in truth the window is over.
      await sleepUntil(t0, LATE_S);
      const late = await Promise.all(scenarios.map((s, i) => request(started[i]!.url, s.ip)));
      for (const [i, s] of scenarios.entries()) {
        if (late[i]!.status !== 200) {
          wrong.push(`${s.name}: ${late[i]!.status} ${LATE_S} s after (${late[i]!.rateLimit})`);
        }
      }
      assert.deepEqual(wrong, [], "refused before, admitted after the window's end");
      await checkStepped(scenarios.filter((s) => s.step < 0), started, scenarios);
    } finally {
      await Promise.all(services.map((s) => s.stop()));
      await redis?.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
