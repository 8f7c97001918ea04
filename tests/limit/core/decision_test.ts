/**
 * Tests of the sliding-log decision every store makes, the report of a look-up that counts nothing,
 * and the rate-limit header fields.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  decide,
  insertInOrder,
  peekDecision,
  policyHeader,
  policyOf,
  preflightDecision,
  rateLimitConstants,
  rateLimitFields,
  type RateLimitPolicy,
  resetSecondsOf,
  undecided,
} from "../../../lib/limit/core/decision.ts";
import { MemoryStore } from "../../../lib/limit/memory/memory_store.ts";

const POLICY: RateLimitPolicy = { limit: 60, windowMs: 60_000 };
const T0 = 1_700_000_000_000;
const CONSTANTS = { policy: policyHeader(POLICY), limit: "60" };

Deno.test("resetSecondsOf() rounds up and never goes below zero", () => {
  assert.equal(resetSecondsOf(T0, T0, 60_000), 60);
  assert.equal(resetSecondsOf(T0, T0 + 59_001, 60_000), 1);
  assert.equal(resetSecondsOf(T0, T0 + 70_000, 60_000), 0);
});

Deno.test("decide() admits under the limit and refuses at it", () => {
  assert.deepEqual(decide(0, undefined, T0, POLICY), {
    allowed: true,
    remaining: 59,
    resetSeconds: 60,
  });
  assert.deepEqual(decide(59, T0, T0 + 30_000, POLICY), {
    allowed: true,
    remaining: 0,
    resetSeconds: 30,
  });
  // A refusal carries its exact reset in ms, as an ordinary field.
  assert.deepEqual(decide(60, T0, T0 + 30_000, POLICY), {
    allowed: false,
    remaining: 0,
    resetSeconds: 30,
    resetMs: 30_000,
  });
  assert.deepEqual(decide(60, T0, T0 + 30_500, POLICY).resetMs, 29_500);
});

Deno.test("peekDecision() reports the full quota over the whole window for a caller with nothing counted (never t=0)", () => {
  assert.deepEqual(peekDecision(0, undefined, T0, POLICY), {
    allowed: true,
    remaining: 60,
    resetSeconds: 60,
  });
});

Deno.test("peekDecision() reports what is left and when the oldest request leaves, without counting", () => {
  assert.deepEqual(peekDecision(3, T0, T0 + 10_000, POLICY), {
    allowed: true,
    remaining: 57,
    resetSeconds: 50,
  });
  assert.deepEqual(peekDecision(60, T0, T0 + 59_500, POLICY), {
    allowed: false,
    remaining: 0,
    resetSeconds: 1,
  });
});

Deno.test("insertInOrder() keeps a log ascending when a timestamp arrives late", () => {
  const log = [10, 20, 30];
  insertInOrder(log, 25);
  insertInOrder(log, 5);
  insertInOrder(log, 30);
  insertInOrder(log, 40);
  assert.deepEqual(log, [5, 10, 20, 25, 30, 30, 40]);
});

Deno.test("rateLimitFields() lists the five fields in draft-10 syntax, and Retry-After on refusal", () => {
  assert.deepEqual(rateLimitFields({ allowed: true, remaining: 3, resetSeconds: 9 }, CONSTANTS), [
    ["ratelimit-policy", '"default";q=60;w=60'],
    ["ratelimit", '"default";r=3;t=9'],
    ["ratelimit-limit", "60"],
    ["ratelimit-remaining", "3"],
    ["ratelimit-reset", "9"],
  ]);
  assert.deepEqual(
    rateLimitFields({ allowed: false, remaining: 0, resetSeconds: 4 }, CONSTANTS).at(-1),
    ["retry-after", "4"],
  );
});

Deno.test("policyOf() and rateLimitConstants() build the policy and its fixed fields from config", () => {
  const policy = policyOf({ rateLimit: 5, rateLimitWindowSeconds: 30 });
  assert.deepEqual(policy, { limit: 5, windowMs: 30_000 });
  assert.deepEqual(rateLimitConstants(policy), { policy: '"default";q=5;w=30', limit: "5" });
});

Deno.test("preflightDecision() counts nothing and never refuses, from a sync or an async store", async () => {
  const store = new MemoryStore({ limit: 2, windowMs: 60_000 }, { sweep: false });
  store.hit("a", T0);
  store.hit("a", T0);
  assert.deepEqual(preflightDecision(store.peek("a", T0 + 1_000)), {
    allowed: true,
    remaining: 0,
    resetSeconds: 59,
  });
  assert.equal(store.hit("a", T0 + 1_000).allowed, false);
  assert.deepEqual(await preflightDecision(Promise.resolve(store.peek("b", T0))), {
    allowed: true,
    remaining: 2,
    resetSeconds: 60,
  });
});

Deno.test("undecided() reports nothing left and a whole window, without refusing", () => {
  assert.deepEqual(undecided(POLICY), { allowed: true, remaining: 0, resetSeconds: 60 });
});
