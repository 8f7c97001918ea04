/**
 * A Node peer of the Node benchmark (`node.ts`), run by Node, one per process so that its memory is
 * its own: `fastify` (Fastify 5 + @fastify/rate-limit) or `express` (Express 5 + express-rate-limit),
 * what a Node user would pick instead of the service. Each answers `GET /api/v1/platform` with the
 * very JSON body bytes the service sends (read from the file `node.ts` captured), under the limit
 * and window of `RATE_LIMIT` and `RATE_LIMIT_WINDOW_SECONDS`, the caller read from `X-Forwarded-For`
 * when the peer is 127.0.0.1 (as the service's `TRUSTED_PROXIES=127.0.0.1`), and refuses with the
 * service's 429 body. Both count a fixed window in memory (their default stores) and send their own
 * rate-limit fields: Fastify three and `Retry-After`, express-rate-limit the draft-8 `RateLimit` and
 * `RateLimit-Policy`. Any other path is their own 404.
 *
 * Usage: `node tests/bench/_node_peer.ts <fastify|express> <packages folder> <bodies.json>`, the
 * packages installed there by `node.ts` (`npm install --no-save`: nothing in package.json). Prints
 * `READY {"<name>": port}` once listening.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { readFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import { createRequire } from "node:module";
import { join } from "node:path";
import process from "node:process";

const [which, folder, file] = process.argv.slice(2);
/** The bodies `node.ts` captured from the service: the platform JSON and the 429's. */
const captured: { platform: string; refused: string } = JSON.parse(readFileSync(file!, "utf8"));
const PLATFORM = Buffer.from(captured.platform, "base64");
const REFUSED = Buffer.from(captured.refused, "base64");
const LIMIT = Number(process.env.RATE_LIMIT ?? "60");
const WINDOW_MS = 1000 * Number(process.env.RATE_LIMIT_WINDOW_SECONDS ?? "60");
const JSON_TYPE = "application/json";
/** The packages of `folder` (CommonJS, or with a CommonJS export): required from there. */
const load = createRequire(join(folder!, "package.json"));

/** Fastify 5 with @fastify/rate-limit, refusing with the service's 429 body. */
async function fastify(): Promise<Server> {
  const app = load("fastify")({ logger: false, trustProxy: "127.0.0.1" });
  await app.register(load("@fastify/rate-limit"), {
    max: LIMIT,
    timeWindow: WINDOW_MS,
    // Thrown by the plugin, answered by the error handler with the service's bytes.
    errorResponseBuilder: () => ({ statusCode: 429, refused: true }),
  });
  app.setErrorHandler(
    (error: { refused?: boolean }, _request: unknown, reply: FastifyReply) => {
      if (!error.refused) throw error;
      reply.code(429).type(JSON_TYPE).send(REFUSED);
    },
  );
  app.get("/api/v1/platform", (_request: unknown, reply: FastifyReply) => {
    reply.type(JSON_TYPE).send(PLATFORM);
  });
  await app.listen({ port: 0, host: "127.0.0.1" });
  return app.server;
}

/** What the Fastify handlers above call on a reply. */
interface FastifyReply {
  code(status: number): FastifyReply;
  type(type: string): FastifyReply;
  send(body: Buffer): void;
}

/** Express 5 with express-rate-limit (draft-8 fields), refusing with the service's 429 body. */
function express(): Promise<Server> {
  const app = load("express")();
  app.set("trust proxy", "127.0.0.1");
  app.set("etag", false);
  app.set("x-powered-by", false);
  const { rateLimit } = load("express-rate-limit");
  app.use(rateLimit({
    limit: LIMIT,
    windowMs: WINDOW_MS,
    standardHeaders: "draft-8",
    legacyHeaders: false,
    handler: (_request: unknown, response: ExpressResponse) =>
      response.status(429).type(JSON_TYPE).send(REFUSED),
  }));
  app.get("/api/v1/platform", (_request: unknown, response: ExpressResponse) => {
    response.type(JSON_TYPE).send(PLATFORM);
  });
  return new Promise((resolve) => {
    const server: Server = app.listen(0, "127.0.0.1", () => resolve(server));
  });
}

/** What the Express handlers above call on a response. */
interface ExpressResponse {
  status(status: number): ExpressResponse;
  type(type: string): ExpressResponse;
  send(body: Buffer): void;
}

const server = which === "fastify" ? await fastify() : await express();
server.keepAliveTimeout = 65_000;
console.log(`READY ${JSON.stringify({ [which!]: (server.address() as AddressInfo).port })}`);
