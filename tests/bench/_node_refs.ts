/**
 * The Node reference servers of the Node benchmark (`node.ts`), run by Node: `raw`, `node:http`
 * sending the bytes the Node service sent for each scenario (read from the file given as argument:
 * status, fields, body per path), with no handler, no limiter and no `Request`: the ceiling on Node;
 * and `srvx`, the same handler as the service served by srvx (the well-kept adapter with no
 * dependency), on the memory store in trusted-proxy mode as the service runs in the benchmark.
 * Prints `READY {"raw":port,"srvx":port}` once both listen.
 *
 * @module
 */
// deno-lint-ignore-file no-console

import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import process from "node:process";
import { loadConfig } from "../../lib/config/config.ts";
import { createHandler } from "../../lib/handler.ts";
import { openRateLimitStore } from "../../lib/limit/open_store.ts";
import { loadContent } from "../../lib/pages/content.ts";
import { NODE_STATIC_FILES } from "../../lib/node/files.ts";

type Sent = { status: number; fields: string[]; body: string };
const sent: Record<string, Sent> = JSON.parse(readFileSync(process.argv[2]!, "utf8"));
const bodies = Object.fromEntries(
  Object.entries(sent).map(([path, s]) => [path, Buffer.from(s.body, "base64")]),
);

const raw = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
  const path = req.url ?? "/";
  const answer = sent[path] ?? sent["/nope"]!;
  res.writeHead(answer.status, answer.fields);
  res.end(bodies[path] ?? bodies["/nope"]);
});
await new Promise<void>((resolve) => raw.listen(0, "127.0.0.1", resolve));

const loaded = loadConfig((name) => process.env[name]);
if (!loaded.ok) throw new Error(loaded.errors.join("; "));
const content = loadContent(loaded.config, NODE_STATIC_FILES);
if (!content.ok) throw new Error(content.errors.join("; "));
const handler = createHandler({
  config: loaded.config,
  content: content.content,
  store: await openRateLimitStore(loaded.config),
});
// Installed by node.ts (`npm install --no-save srvx@1.0.8`): no package of package.json, which a Deno
// start would fetch too.
const { serve } = await import(["srvx"][0]!) as {
  serve(options: Record<string, unknown>): { ready(): Promise<unknown>; url?: string };
};
const srvx = serve({
  port: 0,
  hostname: "127.0.0.1",
  silent: true,
  gracefulShutdown: false,
  fetch: (request: Request & { ip?: string }) =>
    handler(request, { remoteAddr: { hostname: request.ip ?? "" } }),
});
await srvx.ready();
const srvxPort = Number(new URL(srvx.url!).port);
console.log(
  `READY ${JSON.stringify({ raw: (raw.address() as AddressInfo).port, srvx: srvxPort })}`,
);
