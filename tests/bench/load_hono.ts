/**
 * A peer of the load benchmark: what a user might pick instead of the service, Hono with
 * hono-rate-limiter (both from the npm registry) on Deno, answering the platform JSON the service
 * answers, limited per `X-Forwarded-For` caller as the service is in trusted-proxy mode.
 *
 * hono-rate-limiter's default store counts in fixed windows (a caller can be admitted up to twice
 * the limit across a window boundary); the service's log is exact. The limit and window come from
 * `RATE_LIMIT` and `RATE_LIMIT_WINDOW_SECONDS`, as for the service. Runs in its own process (pinned
 * by `load.ts`), so that its peak RSS is its own. Prints `READY {"hono": port}` when listening.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { Hono } from "npm:hono@4.13.19";
import { rateLimiter } from "npm:hono-rate-limiter@0.5.4";
import { createHandler } from "../../lib/handler.ts";
import { loadConfig } from "../../lib/config/config.ts";
import { loadContent } from "../../lib/pages/content.ts";
import { MemoryStore } from "../../lib/limit/memory/memory_store.ts";
import { DISK_STATIC_FILES } from "../../lib/server/static_files.ts";

const loaded = loadConfig((name) => Deno.env.get(name));
if (!loaded.ok) throw new Error(loaded.errors.join("; "));
const config = loaded.config;
const contentResult = loadContent(config, DISK_STATIC_FILES);
if (!contentResult.ok) throw new Error(contentResult.errors.join("; "));
const content = contentResult.content;

/** The service's own JSON body of `GET /api/v1/platform`, so that both send the same bytes. */
async function platformJson(): Promise<string> {
  const store = new MemoryStore({ limit: 1, windowMs: 1000 }, { sweep: false });
  const handler = createHandler({ config, content, store });
  const response = await handler(
    new Request(`http://${config.hostname}:${config.port}/api/v1/platform`, {
      headers: { accept: "application/json", "accept-encoding": "identity" },
    }),
    { remoteAddr: { hostname: "127.0.0.1" } },
  );
  return await response.text();
}

const body = await platformJson();
const app = new Hono();
app.use(rateLimiter({
  windowMs: config.rateLimitWindowSeconds * 1000,
  limit: config.rateLimit,
  standardHeaders: "draft-7",
  keyGenerator: (c) => c.req.header("x-forwarded-for") ?? "unknown",
}));
app.get("/api/v1/platform", (c) => c.body(body, 200, { "content-type": "application/json" }));

const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, app.fetch);
console.log(`READY ${JSON.stringify({ hono: server.addr.port })}`);
