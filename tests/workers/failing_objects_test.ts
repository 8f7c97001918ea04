/**
 * Failing Durable Objects on real workerd (the test Worker, `_limiter_worker.ts`, opens its store
 * with the Worker's own options, `lib/workers/store.ts`, over namespaces whose objects fail):
 *
 * - 3, 10 and 100 attacker addresses whose objects throw "Durable Object is overloaded" or stall,
 *   under `open` and `closed`: an honest caller beside them gets exactly 60 of 100 with exact
 *   fields, the namespace is never taken for down, each attacker gets 60 of 100 under `open` (the
 *   isolate's own count) and none under `closed`, and each is said in a line, truncated.
 * - A namespace outage (every object failing or stalling, the canaries too), with one caller and
 *   with 1,000: known within two store timeouts of the first failed call, said in one line, the
 *   breaker `open` from the answer that found it; no object is called afterwards (every answer is
 *   immediate, even where objects stall).
 *
 * The guard alone, in process, with the same cases: `tests/limit/guard/failing_objects_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { MAX_EXTENSIONS } from "../../lib/limit/guard/guarded_store.ts";
import {
  buildLimiterWorker,
  type BurstReport,
  getJson,
  type HitReport,
  startLimiterWorkerd,
} from "./_limiter_workerd.ts";

const script = await buildLimiterWorker();

/** The store timeout of these tests, in ms (the service's default). */
const TIMEOUT_MS = 100;

/** Requests sent at once to the Worker in the outage tests. */
const WAVE = 25;

/** One line a Worker logged, its JSON parsed (the store writes JSON lines). */
interface Logged {
  level: string;
  event: Record<string, unknown>;
}

/** Runs `body` with workerd serving the test Worker, and the lines it logs. */
async function withWorkerd(body: (url: URL, logs: Logged[]) => Promise<void>): Promise<void> {
  const persist = await Deno.makeTempDir({ prefix: "failing-objects-" });
  const logs: Logged[] = [];
  const onLog = ({ level, message }: { level: string; message: string }) => {
    let event: Record<string, unknown>;
    try {
      event = JSON.parse(message);
    } catch {
      event = { message };
    }
    logs.push({ level, event });
  };
  const workerd = await startLimiterWorkerd({ script, persist, onLog });
  try {
    await body(workerd.urls[0]!, logs);
  } finally {
    await workerd.dispose();
    await Deno.remove(persist, { recursive: true });
  }
}

/** The lines of an outage of the whole namespace. */
function incidentLines(logs: Logged[]): Logged[] {
  return logs.filter((line) =>
    String(line.event.message).startsWith("rate-limit store unavailable")
  );
}

/** The lines naming a caller whose own object fails. */
function callerLines(logs: Logged[]): Logged[] {
  return logs.filter((line) =>
    String(line.event.message).startsWith("a caller's rate-limit object fails")
  );
}

/** Waits until `ready` holds (a line logged reaches this process a little after its answer). */
async function until(ready: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!ready()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

// Slow by nature: 12 cases of 100 rounds through real workerd, each round an honest request and a
// burst of the attackers' requests; the stalling cases wait out a timeout whenever an attacker's
// object is probed (once a second each).
Deno.test("workerd: 3, 10 and 100 attacker addresses whose objects throw or stall, open and closed: an honest caller gets exactly 60 of 100 with exact fields; each attacker 60 under open (the isolate's count), none under closed; each said, truncated; no outage", async (t) => {
  await withWorkerd(async (url, logs) => {
    let scenario = 0;
    for (const attackers of [3, 10, 100]) {
      for (const fault of ["BROKEN", "STALL"] as const) {
        for (const onError of ["open", "closed"] as const) {
          const n = ++scenario;
          await t.step(`${attackers} attackers, ${fault}, ${onError}`, async () => {
            const prefix = `203.0.${n}.`;
            const honest = `192.0.2.${n}`;
            const query =
              `ns=MIXED&fail=${prefix}&fault=${fault}&on_error=${onError}&timeout_ms=${TIMEOUT_MS}`;
            const own: HitReport[] = [];
            const theirs: BurstReport[] = [];
            const started = Date.now();
            for (let round = 0; round < 100; round++) {
              const [mine, burst] = await Promise.all([
                getJson<HitReport>(url, `/hit?key=${honest}&${query}`),
                getJson<BurstReport>(url, `/burst?prefix=${prefix}&n=${attackers}&${query}`),
              ]);
              own.push(mine);
              theirs.push(burst);
            }
            const elapsed = Math.ceil((Date.now() - started) / 1000);
            const label = JSON.stringify(own.slice(55, 65));
            assert.ok(
              own.every((report) => !report.byPolicy && report.breaker === "closed"),
              label,
            );
            assert.deepEqual(
              own.map((report) => [report.decision.allowed, report.decision.remaining]),
              Array.from({ length: 100 }, (_, i) => [i < 60, Math.max(0, 59 - i)]),
              label,
            );
            // The reset: the whole window at the first request, then counting down from it as the
            // clock runs, never up, and never past the time the run took.
            const resets = own.map((report) => report.decision.resetSeconds);
            assert.equal(resets[0], 60, label);
            assert.ok(resets.every((t, i) => i === 0 || t <= resets[i - 1]!), `${resets}`);
            assert.ok(resets.at(-1)! >= 60 - elapsed - 1, `${resets.at(-1)} after ${elapsed} s`);
            for (let a = 0; a < attackers; a++) {
              const answers = theirs.map((burst) => burst.reports[a]!);
              assert.ok(answers.every((report) => report.byPolicy), `attacker ${a}`);
              const admitted = answers.filter((report) => report.decision.allowed).length;
              assert.equal(admitted, onError === "open" ? 60 : 0, `attacker ${a}`);
              if (onError === "closed") {
                assert.ok(answers.every((report) => report.decision.unavailable === true));
              }
            }
            assert.ok(theirs.every((burst) => burst.breaker === "closed"));
            const named = callerLines(logs).filter((line) =>
              String(line.event.caller).startsWith(prefix)
            );
            assert.equal(named.length, Math.min(attackers, 10));
            // Each named by its /24, never its address.
            assert.ok(named.every((line) => line.event.caller === `${prefix}0`));
            assert.equal(named[0]!.level, "warn");
            assert.equal(named[0]!.event.policy, onError);
          });
        }
      }
    }
    assert.deepEqual(incidentLines(logs), [], "never an outage");
  });
});

Deno.test("workerd: a namespace outage (every object throws or stalls, the canaries too), with one caller and with 1,000, open and closed: one line, and the breaker open within two store timeouts of the first failed call; then no object is called but the canaries once a second", async (t) => {
  await withWorkerd(async (url, logs) => {
    let steps = 0;
    for (const ns of ["BROKEN", "STALL"] as const) {
      for (const onError of ["open", "closed"] as const) {
        for (const callers of [1, 1000]) {
          const step = ++steps;
          await t.step(
            `${ns}, ${onError}, ${callers} caller${callers > 1 ? "s" : ""}`,
            async () => {
              const query = `ns=${ns}&on_error=${onError}&timeout_ms=${TIMEOUT_MS}&store=${step}`;
              let before = 0;
              let beforeCallers = 0;
              let started = performance.now();
              /** One caller's request, with when its answer arrived (ms after `started`). */
              const hit = async (key: string) => {
                const report = await getJson<HitReport>(url, `/hit?key=${key}&${query}`);
                return { ...report, at: performance.now() - started };
              };
              // Callers of their own (new objects), whichever step ran before.
              const keys = Array.from(
                { length: callers },
                (_, i) => `10.${step}.${i >> 8}.${i & 255}`,
              );
              // The first wave's objects made beforehand, through a store of their own: local workerd
              // creates each new object (its SQLite files) on its one thread, which holds every
              // timer meanwhile, up to a second for a wave here; on Cloudflare objects run elsewhere.
              const prior = incidentLines(logs).length;
              await getJson<BurstReport>(
                url,
                `/burst?prefix=10.${step}.0.&n=${Math.min(WAVE, callers)}&${query}-made`,
              );
              // That store's lines said, the lines from here on are the measured store's.
              await until(() => incidentLines(logs).length > prior, "that store's outage line");
              before = incidentLines(logs).length;
              beforeCallers = callerLines(logs).length;
              // The first requests, WAVE at once: one of them finds the outage.
              started = performance.now();
              const first = await Promise.all(keys.slice(0, WAVE).map(hit));
              assert.ok(first.every((report) => report.byPolicy));
              assert.ok(first.every((report) => report.decision.allowed === (onError === "open")));
              const found = Math.min(
                ...first.filter((report) => report.breaker !== "closed").map((report) => report.at),
              );
              // deno-lint-ignore no-console
              console.log(
                `${ns} ${onError} ${callers}: the outage known after ${Math.round(found)} ms`,
              );
              // Two timeouts (the caller's call, then the canaries at once), each extended at most
              // MAX_EXTENSIONS times while the loop is busy (here: the canaries' objects made), and
              // HTTP.
              const bound = 2 * (1 + MAX_EXTENSIONS) * TIMEOUT_MS + 200;
              assert.ok(found < bound, `after ${found} ms, over ${bound} ms`);
              await until(() => incidentLines(logs).length > before, "the outage's line");
              // Every caller (again): answered by the policy, no object called but the canaries,
              // checked by one request a probe interval.
              const calls = (await hit(keys[0]!)).calls;
              const rest = [];
              for (let i = 0; i < keys.length; i += WAVE) {
                rest.push(...await Promise.all(keys.slice(i, i + WAVE).map(hit)));
              }
              const last = await hit(keys[0]!);
              assert.ok(rest.every((report) => report.byPolicy && report.breaker !== "closed"));
              assert.equal(last.calls.objects, calls.objects, "no caller's object called");
              const seconds = Math.ceil((last.at - first.at(-1)!.at) / 1000);
              assert.ok(last.calls.canaries - calls.canaries <= 2 * seconds, JSON.stringify(last));
              const lines = incidentLines(logs).slice(before);
              assert.equal(lines.length, 1, JSON.stringify(lines));
              assert.equal(lines[0]!.level, "warn");
              assert.equal(lines[0]!.event.policy, onError);
              assert.equal(lines[0]!.event.store, "durable_object");
              // Callers whose call failed while the canaries were being asked: ten named at most.
              assert.ok(callerLines(logs).length - beforeCallers <= 10);
            },
          );
        }
      }
    }
  });
});
