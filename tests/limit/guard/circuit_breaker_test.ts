/**
 * The circuit breaker: trips on a sustained failure rate over its window of calls, forgets calls
 * older than the window, probes once after the interval, and closes on the probe's success.
 *
 * @module
 */

import assert from "node:assert/strict";
import { CircuitBreaker } from "../../../lib/limit/guard/circuit_breaker.ts";

function breakerAt(start = 0) {
  let now = start;
  const breaker = new CircuitBreaker({
    windowCalls: 10,
    windowMs: 1000,
    minFailures: 3,
    failureRatio: 0.5,
    probeIntervalMs: 500,
    clock: () => now,
  });
  return { breaker, advance: (ms: number) => (now += ms) };
}

Deno.test("breaker trips when the window holds enough failures at the failure ratio", () => {
  const { breaker } = breakerAt();
  for (let i = 0; i < 4; i++) breaker.success();
  assert.equal(breaker.failure(), undefined);
  assert.equal(breaker.failure(), undefined);
  assert.equal(breaker.failure(), undefined, "3 of 7 is under half");
  assert.equal(breaker.failure(), "tripped", "4 of 8 is half");
  assert.equal(breaker.state, "open");
  assert.equal(breaker.allow(), false);
});

Deno.test("breaker forgets failures older than its window", () => {
  const { breaker, advance } = breakerAt();
  breaker.failure();
  breaker.failure();
  advance(1001);
  assert.equal(breaker.failure(), undefined, "the first two left the window");
  assert.equal(breaker.state, "closed");
});

Deno.test("breaker sends one probe after the interval and closes when it succeeds", () => {
  const { breaker, advance } = breakerAt();
  for (let i = 0; i < 3; i++) breaker.failure();
  assert.equal(breaker.state, "open");
  advance(499);
  assert.equal(breaker.allow(), false);
  advance(1);
  assert.equal(breaker.allow(), true, "the probe");
  assert.equal(breaker.allow(), false, "one probe at a time");
  assert.equal(breaker.failure(), undefined, "a failed probe opens it again");
  assert.equal(breaker.state, "open");
  advance(500);
  assert.equal(breaker.allow(), true);
  assert.equal(breaker.success(), "recovered");
  assert.equal(breaker.state, "closed");
  assert.equal(breaker.failure(), undefined, "the window starts afresh");
});

Deno.test("wouldAllow() tells what allow() would answer without taking the probe", () => {
  const { breaker, advance } = breakerAt();
  for (let i = 0; i < 3; i++) breaker.failure();
  assert.equal(breaker.wouldAllow(), false);
  advance(500);
  assert.equal(breaker.wouldAllow(), true);
  assert.equal(breaker.state, "open", "the probe is still there to take");
  assert.equal(breaker.allow(), true);
  assert.equal(breaker.wouldAllow(), false, "probing");
  breaker.success();
  assert.equal(breaker.quiet, true);
});
