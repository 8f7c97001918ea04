/**
 * What the Worker refuses or warns of that `deno task start` takes (`lib/workers/worker_rules.ts`,
 * through `workerConfig`): a `PUBLIC_BASE_URL` with a path, a `TRUSTED_PROXIES` that cannot be
 * right on Workers, `http://`; and the one case `TRUSTED_PROXIES` is right (a proxy of the
 * operator's own in front of Cloudflare), through the Worker's handler with real `Request`s.
 *
 * @module
 */

import assert from "node:assert/strict";
import { STATIC_DIR, STATIC_FILES } from "../../lib/pages/content.ts";
import { workerConfig } from "../../lib/workers/bindings.ts";
import { createWorker } from "../../lib/workers/worker.ts";

const BASE = { PUBLIC_BASE_URL: "https://api.example.com", RATE_LIMITER: {} } as const;

/** The problems `workerConfig` finds in `bindings`, none when it is valid. */
function problems(bindings: Record<string, unknown>): string[] {
  const result = workerConfig(bindings);
  return result.ok ? [] : result.errors;
}

/** The warnings of a valid `bindings`. */
function warnings(bindings: Record<string, unknown>): string[] {
  const result = workerConfig(bindings);
  assert.ok(result.ok, JSON.stringify(result));
  return result.warnings.map((warning) => warning.message);
}

Deno.test("workerConfig() refuses a PUBLIC_BASE_URL with a path, in one sentence naming it; a bare origin (a trailing slash too) is taken", () => {
  for (const base of ["https://api.example.com/base", "https://api.example.com/a/b/"]) {
    const found = problems({ ...BASE, PUBLIC_BASE_URL: base });
    assert.equal(found.length, 1, JSON.stringify(found));
    assert.match(found[0]!, /^PUBLIC_BASE_URL must be an origin on Workers/);
    assert.ok(found[0]!.includes(JSON.stringify(base.replace(/\/$/, ""))), found[0]!);
  }
  assert.deepEqual(problems({ ...BASE, PUBLIC_BASE_URL: "https://api.example.com/" }), []);
  assert.deepEqual(problems(BASE), []);
});

Deno.test("workerConfig() refuses TRUSTED_PROXIES over Cloudflare's addresses, loopback or unix, naming it and the range", () => {
  const cases: Array<[string, RegExp]> = [
    ["2a06:98c0::/29", /Cloudflare's 2a06:98c0::\/29/],
    ["2a06:98c0:3600::103", /got 2a06:98c0:3600::103\/128 \(Cloudflare's 2a06:98c0::\/29\)/],
    ["173.245.48.0/24", /Cloudflare's 173\.245\.48\.0\/20/],
    ["0.0.0.0/0", /got 0\.0\.0\.0\/0/],
    ["::/0", /got ::\/0/],
    ["127.0.0.1", /must not list loopback/],
    ["::1", /must not list loopback/],
    ["unix", /TRUSTED_PROXIES=unix means nothing on Workers/],
  ];
  for (const [value, sentence] of cases) {
    const found = problems({ ...BASE, TRUSTED_PROXIES: value });
    assert.ok(found.length >= 1, value);
    assert.ok(found.every((p) => p.startsWith("TRUSTED_PROXIES")), JSON.stringify(found));
    assert.match(found.join("\n"), sentence, value);
  }
  // The one case it is right: a proxy of the operator's own in front of Cloudflare; warned.
  const own = { ...BASE, TRUSTED_PROXIES: "198.51.100.0/24,2001:db8::/48" };
  assert.deepEqual(problems(own), []);
  const [warning, ...more] = warnings(own);
  assert.deepEqual(more, []);
  assert.match(
    warning!,
    /^TRUSTED_PROXIES=198\.51\.100\.0\/24,2001:db8::\/48 is believed on Workers/,
  );
  assert.match(warning!, /a proxy of your own in front of Cloudflare/);
});

Deno.test("workerConfig() warns of a PUBLIC_BASE_URL over http://, but for a loopback address (deno task worker's own)", () => {
  const [warning, ...more] = warnings({ ...BASE, PUBLIC_BASE_URL: "http://api.example.com" });
  assert.deepEqual(more, []);
  assert.match(
    warning!,
    /^PUBLIC_BASE_URL is "http:\/\/api\.example\.com".*https:\/\/api\.example\.com$/,
  );
  for (
    const base of ["https://api.example.com", "http://127.0.0.1:8787", "http://localhost:8787"]
  ) {
    assert.deepEqual(warnings({ ...BASE, PUBLIC_BASE_URL: base }), [], base);
  }
});

Deno.test("TRUSTED_PROXIES on the Worker, its one case: behind a proxy of the operator's own in front of Cloudflare each client has its budget; a Cloudflare address (another zone's Worker) is never believed", async () => {
  const files = Object.fromEntries(
    STATIC_FILES.map((name) => [name, Deno.readTextFileSync(`${STATIC_DIR}/${name}`)]),
  );
  const worker = createWorker(files, () => assert.fail("no Durable Object with memory"));
  const env = {
    PUBLIC_BASE_URL: "https://api.example.com",
    RATE_LIMIT_STORE: "memory",
    RATE_LIMIT: "2",
    TRUSTED_PROXIES: "198.51.100.7",
  };
  /** The statuses of `count` requests that came through `peer` claiming `client`. */
  const statuses = async (peer: string, client: string, count: number) => {
    const found: number[] = [];
    for (let i = 0; i < count; i++) {
      // Cloudflare appends the address that connected to it, the proxy's, to X-Forwarded-For.
      const request = new Request("https://api.example.com/api/v1/platform", {
        headers: { "cf-connecting-ip": peer, "x-forwarded-for": `${client}, ${peer}` },
      });
      const response = await worker.fetch(request, env);
      await response.body?.cancel();
      found.push(response.status);
    }
    return found;
  };
  assert.deepEqual(await statuses("198.51.100.7", "203.0.113.1", 3), [200, 200, 429]);
  assert.deepEqual(await statuses("198.51.100.7", "203.0.113.2", 2), [200, 200]);
  // Another zone's Worker: a fresh X-Forwarded-For each time, one budget all the same.
  const sprayed: number[] = [];
  for (let i = 1; i <= 3; i++) {
    sprayed.push(...await statuses("2a06:98c0:3600::103", `203.0.113.${100 + i}`, 1));
  }
  assert.deepEqual(sprayed, [200, 200, 429]);
});
