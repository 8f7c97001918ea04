/**
 * The Worker's limit outlives workerd: its Durable Object writes each caller's log through to its
 * storage, so a restart with the storage kept (miniflare's `durableObjectsPersist`, a folder the
 * test owns; on Cloudflare, the object's own storage) keeps the count; two Worker instances (two
 * isolates) bound to the one namespace keep one count. And an isolate whose configuration is
 * invalid answers 500 `internal_error`, the Error shape with no detail.
 *
 * @module
 */

import assert from "node:assert/strict";
import { rawRequest } from "../_server.ts";
import { startWorker } from "./_worker.ts";

const ENV = { ACCESS_LOG: "false" } as const;

/** The statuses of `count` requests of `caller` to the Worker at `url`. */
async function statuses(url: string, caller: string, count: number): Promise<number[]> {
  const seen: number[] = [];
  for (let i = 0; i < count; i++) {
    const response = await rawRequest(url, "/api/v1/platform", {
      headers: { "cf-connecting-ip": caller },
    });
    seen.push(response.status);
  }
  return seen;
}

Deno.test("a restart of workerd with the Durable Objects' storage kept keeps each caller's count", async () => {
  const storage = await Deno.makeTempDir({ prefix: "worker-storage-" });
  try {
    {
      await using first = await startWorker({ ...ENV }, storage);
      assert.deepEqual(await statuses(first.url, "192.0.2.40", 40), Array(40).fill(200));
    }
    await using second = await startWorker({ ...ENV }, storage);
    // 40 of 60 were spent before the restart: 20 more are admitted, then refused.
    assert.deepEqual(await statuses(second.url, "192.0.2.40", 30), [
      ...Array(20).fill(200),
      ...Array(10).fill(429),
    ]);
    // Another caller starts with the whole budget.
    const other = await rawRequest(second.url, "/api/v1/platform", {
      headers: { "cf-connecting-ip": "192.0.2.41" },
    });
    assert.equal(other.headers.get("ratelimit-remaining"), "59");
  } finally {
    await Deno.remove(storage, { recursive: true });
  }
});

Deno.test("an invalid configuration answers every request 500 internal_error, with no detail", async () => {
  await using worker = await startWorker({ ...ENV, RATE_LIMIT: "sixty", SUPPORT_EMAIL: "x" });
  for (const path of ["/api/v1/platform", "/"]) {
    const response = await rawRequest(worker.url, path, {
      headers: { "cf-connecting-ip": "192.0.2.50" },
    });
    assert.equal(response.status, 500);
    assert.equal(response.headers.get("content-type"), "application/json");
    assert.equal(response.headers.get("cache-control"), "no-store");
    const body = JSON.parse(new TextDecoder().decode(response.body));
    assert.equal(body.error.code, "internal_error");
    assert.deepEqual(Object.keys(body.error).sort(), ["code", "hint", "message"]);
    assert.ok(!JSON.stringify(body).includes("sixty"), "the bad value is not echoed");
  }
});

Deno.test("two Worker instances (two isolates) sharing the Durable Object namespace admit 60 of one caller's 100 requests, sent to both at once", async () => {
  await using worker = await startWorker({ ...ENV }, false, 2);
  assert.equal(worker.urls.length, 2);
  const requests = Array.from(
    { length: 100 },
    (_, i) =>
      rawRequest(worker.urls[i % 2]!, "/api/v1/platform", {
        headers: { "cf-connecting-ip": "192.0.2.60" },
      }),
  );
  const statuses = (await Promise.all(requests)).map((response) => response.status);
  assert.equal(statuses.filter((status) => status === 200).length, 60);
  assert.equal(statuses.filter((status) => status === 429).length, 40);
  // Each instance answered some of both: the count is one, not one per isolate.
  for (const parity of [0, 1]) {
    const own = statuses.filter((_, i) => i % 2 === parity);
    assert.ok(own.includes(200), `instance ${parity} admitted some`);
  }
});
