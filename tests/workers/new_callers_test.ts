/**
 * The new callers' budget on real workerd (`lib/workers/new_caller_gate.ts`), with the Worker and
 * the Rate Limiting binding wrangler.json ships (`NEW_CALLERS`, counted by miniflare as one
 * Cloudflare location): a spray of new IPv6 /64s from one /48 creates at most the budget's objects,
 * the rest refused 429 before their object writes anything, while a returning caller of that very
 * /48 and honest callers elsewhere get exactly 60 of 100 with exact fields. About 20 s: 330
 * requests one after the other through workerd (three callers' 100 each, so that every field of
 * every answer is checked) and the accounting of each sprayed caller's object.
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

Deno.test("a spray of new /64s from one /48 creates at most NEW_CALLERS' budget of objects, the rest refused 429 before their object writes; a returning caller of that /48 and callers elsewhere still get 60 of 100 exactly", async () => {
  await using worker = await startWorker(ENV);
  // Honest callers elsewhere, before and after: an IPv4 caller, and a new /64 of another /48.
  const honestBefore = await series(worker, "198.51.100.5", 100);
  let ran = false;
  // miniflare's counts start afresh at each whole period of the clock: a run that straddles one
  // could see two budgets, so it runs again on a fresh /48 (a run takes about a second).
  for (const net of ["5301", "5302", "5303"]) {
    const started = windowOf();
    const returning = `2001:db8:${net}:ffff::1`;
    const first = await ask(worker, returning);
    const sprayed = Array.from({ length: 3 * BUDGET.limit }, (_, i) => `2001:db8:${net}:${i}::1`);
    const answers: Answer[] = [];
    for (let i = 0; i < sprayed.length; i += 6) {
      answers.push(...await Promise.all(sprayed.slice(i, i + 6).map((a) => ask(worker, a))));
    }
    if (windowOf() !== started) continue;
    ran = true;
    assertSixtyOfHundred([first]);
    const admitted = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status !== 200);
    // The returning caller's first request was the /48's first new caller.
    assert.equal(admitted.length, BUDGET.limit - 1, JSON.stringify(answers.map((a) => a.status)));
    for (const answer of refused) {
      assert.equal(answer.status, 429, answer.address);
      assert.equal(answer.code, "rate_limited", answer.address);
      assert.equal(answer.fields.ratelimit, '"default";r=0;t=60', answer.address);
      assert.equal(answer.fields["retry-after"], "60", answer.address);
    }
    for (const answer of answers) {
      const usage = await worker.objectUsage(keyOfIp(parseIp(answer.address)!));
      const created = answer.status === 200;
      assert.equal(usage.stored, created ? 1 : 0, `${answer.address}: ${JSON.stringify(usage)}`);
      assert.equal(usage.alarm === null, !created, `${answer.address}: ${JSON.stringify(usage)}`);
    }
    // The /48's budget is spent: a caller its object already holds never reaches the gate.
    assertSixtyOfHundred(await series(worker, returning, 99), 1);
    break;
  }
  assert.ok(ran, "three runs in a row straddled a period of the budget");
  assertSixtyOfHundred(honestBefore);
  assertSixtyOfHundred(await series(worker, "2001:db8:9999:1::1", 100));
});
