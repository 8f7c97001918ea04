/**
 * The new callers' budget on real workerd (`lib/workers/new_caller_gate.ts`), with the Worker and
 * the Rate Limiting binding wrangler.json ships (`NEW_CALLERS`, counted by miniflare as one
 * Cloudflare location): a spray of new IPv6 /64s from one /48, one request each, writes the
 * budget's objects and no more, while every sprayed caller gets a new caller's exact answer; past
 * the budget a caller is kept in its object's memory (nothing stored, no alarm) and written at its
 * second request; a new caller of that very /48 past its budget, and honest callers elsewhere, get
 * exactly 60 of 100 with exact fields. About 20 s: 330 requests one after the other through
 * workerd (three callers' 100 each, so that every field of every answer is checked) and the
 * accounting of each sprayed caller's object.
 *
 * @module
 */

import assert from "node:assert/strict";
import { parseIp } from "../../lib/http/address.ts";
import { keyOfIp } from "../../lib/limit/caller/caller_key.ts";
import { readWrangler } from "../../lib/build/wrangler_config.ts";
import { ROOT } from "../_deno_info.ts";
import { TEST_BASE_URL } from "../_server.ts";
import { startWorker, type TestWorker } from "./_worker.ts";

const ENV = { PUBLIC_BASE_URL: TEST_BASE_URL, ACCESS_LOG: "false" } as const;

/** The shipped budget: wrangler.json's `NEW_CALLERS` binding. */
const BUDGET = await (async () => {
  const declared = (await readWrangler(ROOT)).ratelimits?.find((r) => r.name === "NEW_CALLERS");
  assert.ok(declared, "wrangler.json declares the NEW_CALLERS binding");
  return declared.simple;
})();

/** What one request answered. */
interface Answer {
  address: string;
  status: number;
  code: string | undefined;
  fields: Record<string, string | null>;
}

const FIELDS = [
  "ratelimit",
  "ratelimit-policy",
  "ratelimit-limit",
  "ratelimit-remaining",
  "ratelimit-reset",
  "retry-after",
] as const;

async function ask(worker: TestWorker, address: string): Promise<Answer> {
  const response = await fetch(`${worker.url}/api/v1/platform`, {
    headers: { "cf-connecting-ip": address },
  });
  const text = await response.text();
  return {
    address,
    status: response.status,
    code: response.status >= 400 ? JSON.parse(text).error?.code : undefined,
    fields: Object.fromEntries(FIELDS.map((name) => [name, response.headers.get(name)])),
  };
}

/**
 * `answers` are a caller's requests `from` to 99 at the limit of 60: the first 60 admitted with `r`
 * counting down, the rest refused with `Retry-After` equal to the reset, every field exact.
 */
function assertSixtyOfHundred(answers: Answer[], from = 0): void {
  answers.forEach((answer, index) => {
    const i = from + index;
    const label = `${answer.address} request ${i + 1}`;
    const { fields } = answer;
    assert.equal(fields["ratelimit-policy"], '"default";q=60;w=60', label);
    assert.equal(fields["ratelimit-limit"], "60", label);
    const reset = Number(fields["ratelimit-reset"]);
    assert.ok(reset >= 1 && reset <= 60, `${label}: reset ${reset}`);
    const remaining = i < 60 ? 59 - i : 0;
    assert.equal(fields["ratelimit-remaining"], String(remaining), label);
    assert.equal(fields.ratelimit, `"default";r=${remaining};t=${reset}`, label);
    if (i < 60) {
      assert.equal(answer.status, 200, label);
      assert.equal(fields["retry-after"], null, label);
    } else {
      assert.equal(answer.status, 429, label);
      assert.equal(answer.code, "rate_limited", label);
      assert.equal(fields["retry-after"], String(reset), label);
    }
  });
}

/** `count` requests of `address`, one after the other. */
async function series(worker: TestWorker, address: string, count: number): Promise<Answer[]> {
  const answers: Answer[] = [];
  for (let i = 0; i < count; i++) answers.push(await ask(worker, address));
  return answers;
}

/** The budget's window, as miniflare counts it: whole periods of the clock. */
const windowOf = () => Math.floor(Date.now() / (BUDGET.period * 1000));

/** Checks the accounting of the object of `address`: written (its log and alarm) or in memory only. */
async function assertObject(worker: TestWorker, address: string, written: boolean): Promise<void> {
  const usage = await worker.objectUsage(keyOfIp(parseIp(address)!));
  const label = `${address}: ${JSON.stringify(usage)}`;
  assert.equal(usage.callers, 1, label);
  assert.equal(usage.stored, written ? 1 : 0, label);
  assert.equal(usage.unwritten, written ? 0 : 1, label);
  assert.equal(usage.alarm === null, !written, label);
}

Deno.test("a spray of new /64s from one /48 writes NEW_CALLERS' budget of objects and no more, every sprayed caller answered exactly; past the budget a caller is written at its second request, and a new caller of that /48 and callers elsewhere get 60 of 100 exactly", async () => {
  await using worker = await startWorker(ENV);
  // Honest callers elsewhere, before and after: an IPv4 caller, and a new /64 of another /48.
  const honestBefore = await series(worker, "198.51.100.5", 100);
  let ran = false;
  // miniflare's counts start afresh at each whole period of the clock: a run that straddles one
  // could see two budgets, so it runs again on a fresh /48 (a run takes about a second).
  for (const net of ["5301", "5302", "5303"]) {
    const started = windowOf();
    const sprayed = Array.from({ length: 3 * BUDGET.limit }, (_, i) => `2001:db8:${net}:${i}::1`);
    const answers: Answer[] = [];
    for (let i = 0; i < sprayed.length; i += 6) {
      answers.push(...await Promise.all(sprayed.slice(i, i + 6).map((a) => ask(worker, a))));
    }
    // The /48's budget is spent: a new caller of it now is kept in memory at its first request.
    const late = `2001:db8:${net}:ffff::1`;
    const lateFirst = await ask(worker, late);
    if (windowOf() !== started) continue;
    ran = true;
    // Every sprayed caller got a new caller's answer, written or not: the budget refuses no one.
    for (const answer of answers) assertSixtyOfHundred([answer]);
    const written: string[] = [];
    for (const answer of answers) {
      const usage = await worker.objectUsage(keyOfIp(parseIp(answer.address)!));
      if (usage.stored === 1) written.push(answer.address);
      await assertObject(worker, answer.address, usage.stored === 1);
    }
    assert.equal(written.length, BUDGET.limit, `written: ${written.join(" ")}`);
    await assertObject(worker, late, false);
    // Its second request writes it, and the 100 are exactly 60 admitted with exact fields.
    assertSixtyOfHundred([lateFirst, ...await series(worker, late, 99)]);
    await assertObject(worker, late, true);
    // A sprayed caller kept in memory comes back: counted from its first request, now written.
    const kept = answers.find((answer) => !written.includes(answer.address))!.address;
    assertSixtyOfHundred([await ask(worker, kept)], 1);
    await assertObject(worker, kept, true);
    break;
  }
  assert.ok(ran, "three runs in a row straddled a period of the budget");
  assertSixtyOfHundred(honestBefore);
  assertSixtyOfHundred(await series(worker, "2001:db8:9999:1::1", 100));
});
