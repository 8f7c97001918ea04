/**
 * The Worker on real workerd (`_worker.ts`: built by `deno task worker:build`'s step, served by
 * miniflare from npm, the Durable Object bound as wrangler.json binds it) answers as the Deno
 * service does: every path, method and representation is held against the OpenAPI document the
 * Worker serves (`_contract.ts`) and compared, status, header fields and body, with the Deno
 * service's answer to the same request (`_server.ts`, same configuration); and its limit is the
 * Durable Object's: 100 requests of one caller admit 60.
 *
 * One workerd start for the file. The Worker's caller is `CF-Connecting-IP`, which miniflare passes
 * on as sent: each batch of requests comes from a caller of its own, and the Deno server's clock is
 * moved a window on at the same time, so both count alike.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type Contract, loadContract } from "../_contract.ts";
import { buildAnswers } from "../../lib/respond/paths.ts";
import {
  rawRequest,
  type RawResponse,
  startServer,
  TEST_BASE_URL,
  testContent,
} from "../_server.ts";
import { startWorker } from "./_worker.ts";

/** The configuration both run with: the defaults, links from one base, no access log. */
const ENV = { PUBLIC_BASE_URL: TEST_BASE_URL, ACCESS_LOG: "false" } as const;

/**
 * Fields that differ between two answers to the same request by nature: the date, the connection,
 * and the rate limit's reset (the Worker's clock runs, the Deno server's is the test's).
 */
const PER_REQUEST = new Set(["date", "connection", "ratelimit", "ratelimit-reset", "retry-after"]);

/** The requests sent to each path: methods, representations, a preflight, a conditional GET. */
const VARIANTS: ReadonlyArray<{ method: string; headers: Record<string, string> }> = [
  { method: "GET", headers: {} },
  { method: "GET", headers: { accept: "application/json" } },
  { method: "GET", headers: { accept: "text/markdown" } },
  { method: "GET", headers: { accept: "text/html;q=0.9, text/markdown;q=0.8" } },
  { method: "HEAD", headers: { accept: "text/markdown" } },
  { method: "OPTIONS", headers: {} },
  {
    method: "OPTIONS",
    headers: { origin: "https://app.example.org", "access-control-request-method": "GET" },
  },
  { method: "POST", headers: {} },
];

/** The fields of `response` that do not change per request, lower-case, sorted. */
function fixedFields(response: RawResponse): Array<[string, string]> {
  return [...response.headers].filter(([name]) => !PER_REQUEST.has(name)).sort();
}

/** Holds `response` to `method target` against the contract, naming the request on failure. */
function checkContract(contract: Contract, method: string, target: string, response: RawResponse) {
  try {
    contract.check(target, method, response);
  } catch (error) {
    throw new Error(`${method} ${target}: ${(error as Error).message}`, { cause: error });
  }
}

Deno.test("the Worker on workerd answers every path, method and representation as the Deno service does, within the contract; 100 requests of one caller admit 60", async (t) => {
  await using worker = await startWorker({ ...ENV });
  await using deno = await startServer({ env: { ...ENV } });
  const windowMs = deno.config.rateLimitWindowSeconds * 1000;
  const contract = await loadContract(worker.url);
  let caller = 0;
  let sent = 0;
  /** Sends one request to both, from a fresh caller every 50 requests on each side. */
  const both = async (target: string, method: string, headers: Record<string, string>) => {
    if (sent++ % 50 === 0) {
      caller++;
      deno.clock.advance(windowMs);
    }
    const viaWorker = { ...headers, "cf-connecting-ip": `198.51.100.${caller}` };
    return [
      await rawRequest(worker.url, target, { method, headers: viaWorker }),
      await rawRequest(deno.url, target, { method, headers }),
    ] as const;
  };
  const paths = [...buildAnswers(deno.config, testContent(deno.config)).paths.keys()];

  await t.step("every path and variant: the contract holds and the answers are equal", async () => {
    for (const target of [...paths, "/no/such/path"]) {
      for (const { method, headers } of VARIANTS) {
        const [fromWorker, fromDeno] = await both(target, method, headers);
        const what = `${method} ${target} ${JSON.stringify(headers)}`;
        checkContract(contract, method, target, fromWorker);
        assert.equal(fromWorker.status, fromDeno.status, what);
        assert.deepEqual(fixedFields(fromWorker), fixedFields(fromDeno), what);
        assert.deepEqual(fromWorker.body, fromDeno.body, what);
      }
    }
  });

  await t.step("a conditional GET answers 304 with the ETag the Worker sent", async () => {
    const [first] = await both("/openapi.json", "GET", {});
    const etag = first.headers.get("etag")!;
    const [fromWorker, fromDeno] = await both("/openapi.json", "GET", { "if-none-match": etag });
    checkContract(contract, "GET", "/openapi.json", fromWorker);
    assert.equal(fromWorker.status, 304);
    assert.deepEqual(fixedFields(fromWorker), fixedFields(fromDeno));
  });

  await t.step(
    "100 requests of one caller: 60 admitted, then 429 rate_limited with Retry-After",
    async () => {
      const statuses: number[] = [];
      for (let i = 0; i < 100; i++) {
        const response = await rawRequest(worker.url, "/api/v1/platform", {
          headers: { "cf-connecting-ip": "203.0.113.60" },
        });
        checkContract(contract, "GET", "/api/v1/platform", response);
        statuses.push(response.status);
        if (response.status === 429) {
          const body = JSON.parse(new TextDecoder().decode(response.body));
          assert.equal(body.error.code, "rate_limited");
          assert.match(response.headers.get("retry-after")!, /^\d+$/);
        }
      }
      assert.deepEqual(statuses, [...Array(60).fill(200), ...Array(40).fill(429)]);
    },
  );
});
