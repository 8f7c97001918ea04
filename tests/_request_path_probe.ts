/**
 * Run by the architecture test under `deno run --coverage`: builds the service's handler with the
 * memory store at the default limit (60 a minute), answers one request for `/api/v1/platform` (JSON,
 * 200) to build what it needs, then `Deno.args[0]` more, from four callers in turn, so that each is
 * admitted and has a log of several requests (a pooled log). Comparing the coverage of two counts
 * tells which modules every request runs.
 *
 * @module
 */

import { createHandler } from "../lib/handler.ts";
import { loadConfig } from "../lib/config/config.ts";
import { recordEnv } from "../lib/config/env.ts";
import { policyOf } from "../lib/limit/core/decision.ts";
import { MemoryStore } from "../lib/limit/memory/memory_store.ts";
import { loadContent } from "../lib/pages/content.ts";
import { DISK_STATIC_FILES } from "../lib/server/static_files.ts";

const loaded = loadConfig(recordEnv({}));
if (!loaded.ok) throw new Error(loaded.errors.join("\n"));
const content = loadContent(loaded.config, DISK_STATIC_FILES);
if (!content.ok) throw new Error(content.errors.join("\n"));
const store = new MemoryStore(policyOf(loaded.config), { sweep: false });
const handler = createHandler({
  config: loaded.config,
  content: content.content,
  store,
  accessLog: () => {},
});
const CALLERS = 4;
const requests = Number(Deno.args[0]);
if (!(requests / CALLERS < loaded.config.rateLimit)) {
  throw new Error("every request must be admitted");
}
const ask = async (i: number) => {
  const info = {
    remoteAddr: { transport: "tcp" as const, hostname: `192.0.2.${i % CALLERS + 1}`, port: 1 },
  };
  const response = await handler(
    new Request("http://localhost/api/v1/platform", { headers: { accept: "application/json" } }),
    info,
  );
  await response.text();
  if (response.status !== 200) throw new Error(`request ${i} answered ${response.status}`);
};
await ask(0);
for (let i = 1; i <= requests; i++) await ask(i);
store.close();
