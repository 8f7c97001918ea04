/**
 * Run by the architecture test under `deno run --coverage`: builds the service's handler with the
 * memory store, answers one request for `/api/v1/platform` (JSON, 200) to build what it needs, then
 * `Deno.args[0]` more. Comparing the coverage of two counts tells which modules every request runs.
 *
 * @module
 */

import { createHandler } from "../lib/handler.ts";
import { loadConfig, recordEnv } from "../lib/config.ts";
import { policyOf } from "../lib/limit/decision.ts";
import { MemoryStore } from "../lib/limit/memory.ts";
import { loadContent } from "../lib/pages/content.ts";

const loaded = loadConfig(recordEnv({ RATE_LIMIT: "1000000" }));
if (!loaded.ok) throw new Error(loaded.errors.join("\n"));
const content = loadContent(loaded.config);
if (!content.ok) throw new Error(content.errors.join("\n"));
const store = new MemoryStore(policyOf(loaded.config), { sweep: false });
const handler = createHandler({
  config: loaded.config,
  content: content.content,
  store,
  accessLog: () => {},
});
const info = { remoteAddr: { transport: "tcp" as const, hostname: "192.0.2.1", port: 1 } };
const ask = () =>
  handler(
    new Request("http://localhost/api/v1/platform", { headers: { accept: "application/json" } }),
    info,
  );
await (await ask()).text();
for (let i = 0; i < Number(Deno.args[0]); i++) await (await ask()).text();
store.close();
