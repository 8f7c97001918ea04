/**
 * Cold start, tested on the real module graph: which `node:` modules and npm packages main.ts loads
 * before it can answer (its static imports, followed transitively; dynamic imports are loaded after
 * listening or when first needed). Node compatibility and npm packages cost most of a cold start
 * (lib/README.md, "Cold start"), so no `node:` module and no npm package may be in the static
 * graph. And a fresh process answers a request that needs what it has not loaded yet as it would
 * later, except that until the warm-up has compressed its bodies it answers br and gzip requests in
 * identity.
 *
 * @module
 */

import assert from "node:assert/strict";
import { denoInfo, ROOT } from "./_deno_info.ts";
import { freePort } from "./_redis.ts";
import { startService } from "./_service_process.ts";
import { startTaskArgs, startTaskEntry } from "./bench/_start_task.ts";

/**
 * Every module main.ts reaches through static (non-type) imports only: local ones as their path
 * from the project's root (`lib/...`), others as their specifier without a version.
 */
async function staticallyLoaded(): Promise<Set<string>> {
  const info = await denoInfo();
  const bySpecifier = new Map(info.modules.map((module) => [module.specifier, module]));
  const root = new URL("../", import.meta.url).href;
  const loaded = new Set<string>();
  const seen = new Set<string>();
  const pending = [...info.roots];
  for (let specifier = pending.pop(); specifier !== undefined; specifier = pending.pop()) {
    if (seen.has(specifier)) continue;
    seen.add(specifier);
    if (!specifier.startsWith("file:")) {
      loaded.add(specifier.replace(/@[^@/]+$/, ""));
      continue;
    }
    loaded.add(specifier.replace(root, ""));
    for (const dependency of bySpecifier.get(specifier)?.dependencies ?? []) {
      if (!dependency.isDynamic && dependency.code !== undefined) {
        pending.push(dependency.code.specifier);
      }
    }
  }
  return loaded;
}

Deno.test("main.ts loads no node: module and no npm package before its first response", async () => {
  const external = [...await staticallyLoaded()].filter((name) =>
    name.startsWith("node:") || name.startsWith("npm:")
  );
  assert.deepEqual(external, []);
});

Deno.test("main.ts loads none of the shared stores' modules before its first response (the default store is in memory)", async () => {
  const loaded = await staticallyLoaded();
  assert.ok(
    loaded.has("lib/limit/memory/memory_store.ts"),
    "the graph is read as paths from the root",
  );
  const shared = [
    "lib/limit/guard/guarded_store.ts",
    "lib/limit/guard/circuit_breaker.ts",
    "lib/limit/kv/kv_store.ts",
    "lib/limit/redis/redis_store.ts",
    "lib/limit/local_first/local_first_store.ts",
    "lib/limit/local_first/hit_codec.ts",
    "lib/limit/redis/redis_hit_log.ts",
    "lib/limit/kv/kv_hit_log.ts",
  ].filter((path) => loaded.has(path));
  assert.deepEqual(shared, []);
});

Deno.test("main.ts loads the start-up explanations, Deno Deploy's defaults and the warm-up only when it needs them", async () => {
  const loaded = await staticallyLoaded();
  assert.ok(loaded.has("lib/handler.ts"), "the graph is read as paths from the root");
  // Failures only; on Deno Deploy only; 0.5 s after start-up (lib/README.md, "Cold start").
  const later = [
    "lib/server/startup.ts",
    "lib/lifecycle/startup_errors.ts",
    "lib/server/deno_deploy.ts",
    "lib/warm_up.ts",
  ];
  assert.deepEqual(later.filter((path) => loaded.has(path)), []);
});

/** How long a test waits for the warm-up (0.5 s after start-up) to compress the bodies. */
const WARM_UP_WAIT_MS = 10_000;

/** Reports each first use of a lazily loaded global, and the first response (`--preload`). */
const PROBE = new URL("./_lazy_globals_probe.ts", import.meta.url).pathname;

/** Waits until `events` holds one that `matches`, at most {@linkcode WARM_UP_WAIT_MS}. */
async function eventWhere(
  events: Record<string, unknown>[],
  matches: (event: Record<string, unknown>) => boolean,
  what: string,
): Promise<number> {
  const deadline = Date.now() + WARM_UP_WAIT_MS;
  for (;;) {
    const index = events.findIndex(matches);
    if (index >= 0) return index;
    assert.ok(Date.now() < deadline, `no event: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

// Deno loads `setTimeout` and `setInterval` from node:timers (Node's errors, async hooks, timers),
// and `atob`, `btoa`, `Buffer` and `process` from their modules, the first time each is read: the
// static graph above cannot show it. Access log on, as by default: its first line is scheduled too.
Deno.test("a fresh service reads no lazily loaded global (Node's timers, atob, btoa, Buffer, process) and calls no console method before its first response; the warm-up reads them later", async () => {
  const service = await startService({ ACCESS_LOG: "true" }, undefined, { preload: PROBE });
  try {
    const response = await fetch(`${service.url}/api/v1/platform`);
    await response.body?.cancel();
    assert.equal(response.status, 200);
    const first = await eventWhere(service.events, (e) => "firstResponse" in e, "first response");
    const before = service.events.slice(0, first).filter((event) => "lazyGlobal" in event);
    assert.deepEqual(
      before.map((event) => event.lazyGlobal),
      [],
      before.map((event) => String(event.stack)).join("\n\n"),
    );
    // Nor the console (loaded on first use): the "listening" line is written to stderr directly.
    const consoleCalls = service.events.slice(0, first).filter((event) => "consoleCall" in event);
    assert.deepEqual(
      consoleCalls.map((event) => event.consoleCall),
      [],
      consoleCalls.map((event) => String(event.stack)).join("\n\n"),
    );
    // The probe does see them: the warm-up's steps are scheduled with setTimeout.
    await eventWhere(service.events, (e) => e.lazyGlobal === "setTimeout", "setTimeout read");
  } finally {
    await service.stop();
  }
});

Deno.test("a fresh service answers br requests in identity until the warm-up has compressed its bodies, then in br", async () => {
  const service = await startService({});
  try {
    const get = async () => {
      const response = await fetch(`${service.url}/openapi.json`, {
        headers: { "accept-encoding": "br" },
      });
      const body = new Uint8Array(await response.arrayBuffer());
      return { response, body };
    };
    const first = await get();
    assert.equal(first.response.status, 200);
    assert.equal(first.response.headers.get("content-encoding"), null);
    assert.match(first.response.headers.get("vary") ?? "", /Accept-Encoding/);
    JSON.parse(new TextDecoder().decode(first.body));
    const deadline = Date.now() + WARM_UP_WAIT_MS;
    while (
      !service.events.some((event) => event.message === "warmed up: every representation built")
    ) {
      assert.ok(Date.now() < deadline, "the warm-up did not finish");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const later = await get();
    assert.equal(later.response.headers.get("content-encoding"), "br");
    // (fetch decodes br: the body read is the identity one again.)
    assert.deepEqual(later.body, first.body);
    assert.notEqual(later.response.headers.get("etag"), first.response.headers.get("etag"));
    // The identity variant keeps its ETag: a client revalidating it still gets 304.
    const revalidated = await fetch(`${service.url}/openapi.json`, {
      headers: {
        "accept-encoding": "identity",
        "if-none-match": first.response.headers.get("etag")!,
      },
    });
    await revalidated.body?.cancel();
    assert.equal(revalidated.status, 304);
  } finally {
    await service.stop();
  }
});

Deno.test("a fresh service's first request with weighted Accept fields waits for negotiator and gets its type, in identity", async () => {
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
    // Nothing is compressed yet (the warm-up begins 0.5 s after start-up): no coding.
    assert.equal(response.headers.get("content-encoding"), null);
  } finally {
    await service.stop();
  }
});

/** A service started exactly as `deno task start` starts it, with every line it wrote on stderr. */
interface TaskProcess {
  url: string;
  lines: string[];
  stop(): Promise<void>;
}

/** How long a test waits for a service started as `deno task start` (an empty cache transpiles). */
const TASK_START_WAIT_MS = 30_000;

/**
 * Builds what `deno task start` builds, then runs what it runs (`deno run <flags>
 * dist/app/main.js --listen`) from the project's folder (its `--allow-read` paths are relative to
 * it) on a free port, and waits until it logs that it listens.
 */
async function startAsTask(env: Record<string, string>): Promise<TaskProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args: startTaskArgs(),
    cwd: ROOT,
    env: {
      PORT: "0",
      HOSTNAME: "127.0.0.1",
      PUBLIC_BASE_URL: "http://127.0.0.1",
      NO_COLOR: "1",
      ...env,
    },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const reading = (async () => {
    let pending = "";
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      const parts = (pending + chunk).split("\n");
      pending = parts.pop()!;
      lines.push(...parts);
    }
  })();
  const stop = async () => {
    try {
      child.kill("SIGKILL");
    } catch { /* already gone */ }
    await child.status;
    await reading;
  };
  const deadline = Date.now() + TASK_START_WAIT_MS;
  for (;;) {
    const listening = lines.map(parseEvent).find((event) => event?.message === "listening");
    if (listening) return { url: String(listening.address).replace(/\/$/, ""), lines, stop };
    if (Date.now() > deadline) {
      await stop();
      assert.fail(
        `the service did not listen within ${TASK_START_WAIT_MS} ms:\n${lines.join("\n")}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function parseEvent(line: string): Record<string, unknown> | undefined {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

/** A loopback URL on which nothing listens (a port just released). */
function closedLoopbackUrl(): string {
  return `http://127.0.0.1:${freePort()}/`;
}

// Deno reads, and resolves, every statically analysable dynamic import when it builds the graph at
// start-up, unless told to wait for the import (`--unstable-lazy-dynamic-imports`, which
// `deno task start` passes): the modules main.ts imports on demand and the npm packages behind them
// (negotiator, marked, the Redis client) were read and resolved before main.ts ran (lib/README.md,
// "Cold start"). An empty Deno cache and an unreachable npm registry make that visible: Deno then says
// "Download" for each package it resolves.
Deno.test("deno task start resolves no npm package before its first responses: an empty Deno cache and an unreachable registry do not reach them", async () => {
  const cache = await Deno.makeTempDir({ prefix: "discovery-empty-deno-dir-" });
  const service = await startAsTask({ DENO_DIR: cache, NPM_CONFIG_REGISTRY: closedLoopbackUrl() });
  try {
    for (const path of ["/api/v1/platform", "/"]) {
      const response = await fetch(`${service.url}${path}`);
      await response.body?.cancel();
      assert.equal(response.status, 200, path);
    }
    const downloads = service.lines.filter((line) => /download/i.test(line));
    assert.deepEqual(downloads, [], "resolved npm packages before the first responses");
  } finally {
    await service.stop();
    await Deno.remove(cache, { recursive: true });
  }
});

Deno.test("with exactly deno task start's permissions, what main.ts imports on demand loads: the warm-up builds every representation and negotiator answers a weighted Accept", async () => {
  const service = await startAsTask({ ACCESS_LOG: "false" });
  try {
    const response = await fetch(`${service.url}/api/v1/platform`, {
      headers: { accept: "application/json;q=0.5, text/markdown;q=0.9" },
    });
    await response.body?.cancel();
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /^text\/markdown/);
    const deadline = Date.now() + WARM_UP_WAIT_MS;
    const events = () => service.lines.map(parseEvent).filter((event) => event !== undefined);
    while (!events().some((event) => event.message === "warmed up: every representation built")) {
      const failed = events().filter((event) => event.level === "error");
      assert.deepEqual(failed, [], "the warm-up failed");
      assert.ok(Date.now() < deadline, `the warm-up did not finish:\n${service.lines.join("\n")}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.deepEqual(events().filter((event) => event.level === "error"), []);
  } finally {
    await service.stop();
  }
});

// `deno task start` runs main.ts bundled (`deno task build`: `deno bundle`, lib/README.md, "Cold
// start"): the same service in five modules of JavaScript instead of 27 of TypeScript. It must
// answer byte for byte as main.ts does, `static/` found from the bundle's folder as from
// lib/pages/.
Deno.test("the bundle deno task start runs answers every path with the bytes, ETags and fields main.ts answers", async () => {
  const env = { ACCESS_LOG: "false", PUBLIC_BASE_URL: "https://discovery.example.com" };
  const bundle = await startAsTask(env);
  const source = await startService(env);
  try {
    const paths = [
      "/api/v1/platform",
      "/",
      "/developers",
      "/developers/deprecation-policy",
      "/developers/deprecation-policy.md",
      "/openapi.json",
      "/llms.txt",
      "/robots.txt",
      "/.well-known/api-catalog",
      "/style.css",
      "/favicon.svg",
      "/missing",
    ];
    for (const path of paths) {
      for (const accept of ["*/*", "text/markdown"]) {
        const get = async (base: string) => {
          const response = await fetch(`${base}${path}`, {
            headers: { accept, "accept-encoding": "identity" },
          });
          const fields = [...response.headers].filter(([name]) => !name.startsWith("ratelimit"))
            .filter(([name]) => name !== "date");
          return { status: response.status, fields, body: await response.text() };
        };
        assert.deepEqual(await get(bundle.url), await get(source.url), `${path}, ${accept}`);
      }
    }
  } finally {
    await bundle.stop();
    await source.stop();
  }
});

Deno.test("the bundle leaves every npm package main.ts imports to Deno, by name, as main.ts does", async () => {
  startTaskArgs();
  const info = await denoInfo();
  const packages = [
    ...new Set(
      info.modules.map((module) => module.specifier).filter((specifier) =>
        specifier.startsWith("npm:")
      ).map(npmPackageName),
    ),
  ].sort();
  assert.ok(packages.includes("negotiator"), `npm packages found: ${packages.join(", ")}`);
  // Every chunk the bundle's entry reaches, statically or not (a folder may keep older builds').
  const chunks = new Set([new URL(`../${startTaskEntry()}`, import.meta.url).href]);
  let code = "";
  for (const chunk of chunks) {
    const text = await Deno.readTextFile(new URL(chunk));
    code += text;
    for (const [, relative] of text.matchAll(/(?:from |import\()"(\.\.?\/[^"]+)"/g)) {
      chunks.add(new URL(relative!, chunk).href);
    }
  }
  assert.ok(chunks.size > 5, `chunks reached: ${chunks.size}`);
  const imported = packages.filter((name) =>
    code.includes(`from "${name}"`) || code.includes(`import("${name}")`) ||
    code.includes(`import("${name}/`) // a subpath: gpt-tokenizer's encoding
  );
  assert.deepEqual(imported, packages, "an npm package was copied into the bundle");
});

/** `negotiator` of `npm:/negotiator@1.0.0/index.js`, `@redis/client` of `npm:/@redis/client@6.3.1`. */
function npmPackageName(specifier: string): string {
  const segments = specifier.replace(/^npm:\/?/, "").split("/");
  const name = segments[0]!.startsWith("@") ? `${segments[0]}/${segments[1]}` : segments[0]!;
  return name.replace(/(.)@.*$/, "$1");
}
