/**
 * Cold start, tested on the real module graph: which `node:` modules and npm packages main.ts loads
 * before it can answer (its static imports, followed transitively; dynamic imports are loaded after
 * listening or when first needed). Node compatibility and npm packages cost most of a cold start
 * (README, "Cold start"), so those named here must stay out of the static graph. And a fresh
 * process answers a request that needs what it has not loaded yet as it would later.
 *
 * @module
 */

import assert from "node:assert/strict";
import { denoInfo } from "./_deno_info.ts";
import { startService } from "./_service_process.ts";

/** The `node:` and `npm:` specifiers main.ts reaches through static (non-type) imports only. */
async function staticallyLoadedExternals(): Promise<Set<string>> {
  const info = await denoInfo();
  const bySpecifier = new Map(info.modules.map((module) => [module.specifier, module]));
  const externals = new Set<string>();
  const seen = new Set<string>();
  const pending = [...info.roots];
  for (let specifier = pending.pop(); specifier !== undefined; specifier = pending.pop()) {
    if (seen.has(specifier)) continue;
    seen.add(specifier);
    if (!specifier.startsWith("file:")) {
      externals.add(specifier.replace(/@[^@/]+$/, ""));
      continue;
    }
    for (const dependency of bySpecifier.get(specifier)?.dependencies ?? []) {
      if (!dependency.isDynamic && dependency.code !== undefined) {
        pending.push(dependency.code.specifier);
      }
    }
  }
  return externals;
}

Deno.test("main.ts loads no node:path before its first response", async () => {
  const externals = await staticallyLoadedExternals();
  assert.ok(!externals.has("node:path"), [...externals].join(", "));
});

Deno.test("main.ts loads no npm package before its first response", async () => {
  const npm = [...await staticallyLoadedExternals()].filter((name) => name.startsWith("npm:"));
  assert.deepEqual(npm, []);
});

Deno.test("a fresh service's first request with weighted Accept fields waits for negotiator and gets its choice", async () => {
  const service = await startService({});
  try {
    const response = await fetch(`${service.url}/api/v1/platform`, {
      headers: {
        accept: "application/json;q=0.5, text/markdown;q=0.9",
        "accept-encoding": "br;q=0.5, gzip;q=1",
      },
    });
    await response.body?.cancel();
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /^text\/markdown/);
    assert.equal(response.headers.get("content-encoding"), "gzip");
  } finally {
    await service.stop();
  }
});
