/**
 * The reference the memory store's property tests hold it to: a plain sliding log per caller (every
 * admitted time kept, dropped only when a request of that caller finds it out of the window), plus
 * what the store's sweep does, stated exactly.
 *
 * A sweep at time `s` may forget a caller whose newest counted request is at or before `s - window`:
 * the store forgets exactly those it visits, and a partial sweep (a budget) visits only some. While
 * the clock only moves forward, a forgotten caller and a kept one decide alike (nothing of either is
 * in any later window). They differ only after the clock steps back behind the sweep: the kept
 * caller's old requests are in the window again, the forgotten caller has none (as a Redis key that
 * expired). So the model keeps, per caller, every log the store may hold, and the store's answer
 * picks among them: an answer that none of them gives fails.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  type Decision,
  type RateLimitPolicy,
  resetSecondsOf,
} from "../../lib/limit/core/decision.ts";

/** What the store answers: a refusal with its exact reset in ms, nothing else optional. */
type Answer = Pick<Decision, "allowed" | "remaining" | "resetSeconds" | "resetMs">;

/** A sliding log per caller, with every state a sweep may have left (see the module comment). */
export class SlidingLogModel {
  readonly #limit: number;
  readonly #windowMs: number;
  /** Per caller: the logs the store may hold (ascending), at least one. */
  readonly #logs = new Map<string, number[][]>();

  /** Whether a log keeps its newest `limit` times rather than those in the window. */
  readonly #keepNewest: boolean;

  /**
   * A model of a store under `policy` that has seen nothing. `keepNewest`: the store keeps each
   * caller's newest `limit` times whatever the window (the Durable Object's logs), so a clock that
   * steps back finds the times it had left behind still counted.
   */
  constructor(policy: RateLimitPolicy, options: { keepNewest?: boolean } = {}) {
    this.#limit = policy.limit;
    this.#windowMs = policy.windowMs;
    this.#keepNewest = options.keepNewest ?? false;
  }

  /** Checks the store's answer to a request of `key` at `now`, and counts it as the store did. */
  hit(key: string, now: number, answer: Answer): void {
    const next: number[][] = [];
    for (const log of this.#pick(key, now, answer, "hit")) {
      const kept = this.#keepNewest ? [...log] : log.filter((t) => t > now - this.#windowMs);
      if (answer.allowed) kept.push(now);
      kept.sort((a, b) => a - b);
      next.push(this.#keepNewest ? kept.slice(-this.#limit) : kept);
    }
    this.#logs.set(key, dedupe(next));
  }

  /**
   * Counts a hit another instance admitted at `t` (`MemoryStore.record`): in order, and the log keeps
   * its newest `limit` times (they decide every later request as the whole log would).
   */
  record(key: string, t: number): void {
    const logs = this.#logs.get(key) ?? [[]];
    const next = logs.map((log) => [...log, t].sort((a, b) => a - b).slice(-this.#limit));
    this.#logs.set(key, dedupe(next));
  }

  /** The store lost everything of `key` (a Durable Object's caller kept in memory only, evicted). */
  forget(key: string): void {
    this.#logs.set(key, [[]]);
  }

  /** Checks the store's report on `key` at `now` (nothing is counted). */
  peek(key: string, now: number, answer: Answer): void {
    this.#logs.set(key, this.#pick(key, now, answer, "peek"));
  }

  /** A sweep at `now` may have forgotten every caller whose newest time has left the window. */
  sweep(now: number): void {
    for (const [key, logs] of this.#logs) {
      if (logs.some((log) => log.length > 0 && log.at(-1)! <= now - this.#windowMs)) {
        this.#logs.set(key, dedupe([...logs, []]));
      }
    }
  }

  /** The logs of `key` that give `answer` at `now`; fails when none does. */
  #pick(key: string, now: number, answer: Answer, kind: "hit" | "peek"): number[][] {
    const logs = this.#logs.get(key) ?? [[]];
    const expected = logs.map((log) => this.#answer(log, now, kind));
    const same = logs.filter((_, i) => sameAnswer(expected[i]!, answer));
    assert.ok(
      same.length > 0,
      `${kind} ${key} at ${now}: got ${JSON.stringify(answer)}, expected one of ${
        JSON.stringify(expected)
      } (logs ${JSON.stringify(logs)})`,
    );
    return same;
  }

  /** What a plain sliding log `log` answers at `now`. */
  #answer(log: number[], now: number, kind: "hit" | "peek"): Answer {
    const limit = this.#limit;
    const live = log.filter((t) => t > now - this.#windowMs);
    if (kind === "peek") {
      return {
        allowed: live.length < limit,
        remaining: Math.max(0, limit - live.length),
        resetSeconds: live.length === 0
          ? Math.round(this.#windowMs / 1000)
          : resetSecondsOf(live[0]!, now, this.#windowMs),
      };
    }
    const allowed = live.length < limit;
    const oldest = allowed ? Math.min(live[0] ?? now, now) : live[0]!;
    const answer = {
      allowed,
      remaining: allowed ? limit - live.length - 1 : 0,
      resetSeconds: resetSecondsOf(oldest, now, this.#windowMs),
    };
    return allowed ? answer : { ...answer, resetMs: Math.max(0, oldest + this.#windowMs - now) };
  }
}

/**
 * Whether the store's answer `b` is exactly `a`: a refusal's `resetMs` too, and no other field
 * (`-0` is not `0`).
 */
function sameAnswer(a: Answer, b: Answer): boolean {
  return a.allowed === b.allowed && a.remaining === b.remaining &&
    Object.is(a.resetSeconds, b.resetSeconds) && Object.is(a.resetMs, b.resetMs) &&
    Object.keys(b).length === Object.keys(a).length;
}

/** `logs` without repeats. */
function dedupe(logs: number[][]): number[][] {
  const seen = new Map(logs.map((log) => [log.join(","), log]));
  return [...seen.values()];
}
