/**
 * One refused caller hammering a Worker isolate on 64 connections, on real workerd (the test Worker
 * of `_limiter_workerd.ts`, which counts the `hit` calls the isolate sends to each caller's object):
 * the isolate asks the caller's object at most once per hold of the refusal memo
 * (`lib/limit/guard/refusal_memo.ts`), the requests arriving meanwhile waiting for that one call
 * (`lib/limit/guard/in_flight.ts`), and every answer is a refusal.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  buildLimiterWorker,
  getJson,
  type HitReport,
  startLimiterWorkerd,
} from "./_limiter_workerd.ts";
import { MEMO_HOLD_MS, MEMO_SPREAD_MS } from "../../lib/limit/guard/refusal_memo.ts";

const script = await buildLimiterWorker();

/** Connections hammering at once, as a client library's pool or a load tester's would. */
const CONNECTIONS = 64;

Deno.test("workerd: one refused caller on 64 connections costs its isolate one object call per hold at most, and is refused throughout", async () => {
  // Slow (about 7 s): it hammers across two holds of the shipped MEMO_HOLD_MS.
  const persist = await Deno.makeTempDir({ prefix: "limiter-refused-" });
  const workerd = await startLimiterWorkerd({ script, persist });
  try {
    const url = workerd.urls[0]!;
    const key = "192.0.2.50";
    for (let i = 0; i < 60; i++) {
      assert.equal((await getJson<HitReport>(url, `/hit?key=${key}`)).decision.allowed, true);
    }
    assert.equal((await getJson<HitReport>(url, `/hit?key=${key}`)).decision.allowed, false);
    const before = (await getJson<{ calls: number }>(url, `/calls?key=${key}`)).calls;
    assert.equal(before, 61);
    const started = performance.now();
    let requests = 0;
    let admitted = 0;
    const connection = async () => {
      while (performance.now() - started < 2 * MEMO_HOLD_MS + 500) {
        const report = await getJson<HitReport>(url, `/hit?key=${key}`);
        requests++;
        if (report.decision.allowed || report.byPolicy) admitted++;
      }
    };
    await Promise.all(Array.from({ length: CONNECTIONS }, connection));
    const elapsed = performance.now() - started;
    const calls = (await getJson<{ calls: number }>(url, `/calls?key=${key}`)).calls - before;
    assert.equal(admitted, 0, "refused throughout, by its object or from memory");
    // A hold is 2 to 3 s: at most one call per 2 s (and one more begun as the run ends).
    const most = Math.ceil(elapsed / (MEMO_HOLD_MS - MEMO_SPREAD_MS)) + 1;
    assert.ok(calls >= 1 && calls <= most, `${calls} object calls for ${requests} requests`);
    assert.ok(requests > 20 * CONNECTIONS, `${requests} requests: the connections hammered`);
  } finally {
    await workerd.dispose();
    await Deno.remove(persist, { recursive: true });
  }
});

Deno.test("workerd: a request that leaves while its call for a likely refused caller is in flight wedges nothing: the requests that waited for it, and the caller's next ones, are answered", async () => {
  // A limit of 1: after one admission the caller is likely refused, and its next requests wait
  // for the one call in flight. The object answers 500 ms late (`ns=SLOW`), so the call is still
  // in flight when its request's client leaves, which cancels that request on workerd.
  const persist = await Deno.makeTempDir({ prefix: "limiter-left-" });
  const workerd = await startLimiterWorkerd({ script, persist, limit: 1 });
  try {
    const url = workerd.urls[0]!;
    const path = "/hit?key=192.0.2.51&ns=SLOW";
    assert.equal((await getJson<HitReport>(url, path)).decision.allowed, true);
    const leaving = new AbortController();
    const left = fetch(new URL(path, url), { signal: leaving.signal }).then(
      (response) => response.body?.cancel(),
      () => undefined,
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    const waited = getJson<HitReport>(url, path); // waits for the call of the request leaving
    await new Promise((resolve) => setTimeout(resolve, 50));
    leaving.abort();
    await left;
    const started = performance.now();
    const report = await waited;
    assert.equal(report.decision.allowed, false, JSON.stringify(report));
    assert.equal(report.byPolicy, false, "refused by its object");
    // Its own call at most (the object's 500 ms) after the timeout of the one it waited for (1 s).
    assert.ok(performance.now() - started < 3000, `${performance.now() - started} ms`);
    const next = await getJson<HitReport>(url, path);
    assert.equal(next.decision.allowed, false, JSON.stringify(next));
  } finally {
    await workerd.dispose();
    await Deno.remove(persist, { recursive: true });
  }
});
