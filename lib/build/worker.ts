/**
 * Builds the Worker (`deno task worker:build`): one ES module, `dist/worker/worker.js`, that
 * Cloudflare (wrangler) and workerd (miniflare) run as it is.
 *
 * The bundler is Deno's own (`deno bundle --platform=browser`, esbuild inside): it resolves the
 * project's import map and npm packages as `deno task start` does, so there is no second resolver
 * to keep in step and nothing to install. `static/` is embedded: the build writes an entry module
 * (`dist/worker/entry.<id>.ts`, removed once built) holding each static file's text and handing it
 * to `createWorker`, beside the Durable Object class the Worker exports. The token counts' ranks
 * are built first (`deno task build:tokens`) and carried as a module of constants. Dynamic imports
 * (negotiator, marked) are bundled in, so the Worker is one file. Prints the bundle's size and its
 * gzip size. Before building, `deno task worker:build` checks wrangler.json's vars as an isolate
 * would (`wrangler_config.ts`) and stops, naming the variable, on one the Worker cannot run with.
 *
 * @module
 */

import { STATIC_DIR, STATIC_FILES } from "../pages/content.ts";
import { compressBytes } from "../http/representation.ts";
import { checkDeployment, readWrangler, reportDeployment } from "./wrangler_config.ts";

/** Where the build writes, relative to the project's root. */
export const WORKER_DIR = "dist/worker";

/** The Worker module wrangler.json and miniflare load. */
export const WORKER_MODULE = `${WORKER_DIR}/worker.js`;

/** The entry module: the static files' texts and the Worker's exports. */
function entrySource(files: Record<string, string>): string {
  return [
    "// Written by lib/build/worker.ts: the Worker's entry, static/ embedded. Not committed.",
    'import { createWorker } from "../../lib/workers/worker.ts";',
    'export { RateLimiterObject } from "../../lib/workers/rate_limiter_object.ts";',
    `export default createWorker(${JSON.stringify(files)});`,
    "",
  ].join("\n");
}

/** The sizes of a built Worker, in bytes. */
export interface BuiltWorker {
  /** The module's size. */
  bytes: number;
  /** Its gzip size (what Cloudflare's limits count). */
  gzipBytes: number;
}

/**
 * Builds the Worker into {@linkcode WORKER_DIR} under `root` (the project's root) with the Deno at
 * `deno` (this one by default).
 */
export async function buildWorker(root: string, deno = Deno.execPath()): Promise<BuiltWorker> {
  const files = Object.fromEntries(
    STATIC_FILES.map((name) => [name, Deno.readTextFileSync(`${STATIC_DIR}/${name}`)]),
  );
  // The token counts' ranks as a module of constants (`deno task build:tokens`), which the bundle
  // carries: the Worker counts exactly with no thread and no file (lib/pages/tokens.ts).
  await run(deno, root, ["task", "--quiet", "build:tokens"]);
  await Deno.mkdir(`${root}/${WORKER_DIR}`, { recursive: true });
  // Each build writes files of its own and moves the finished module into place at once: two
  // builds at the same time (the parallel suite's test files) once let workerd load the other's
  // bundle before its fallback was taken out.
  const id = crypto.randomUUID().slice(0, 8);
  const entry = `${WORKER_DIR}/entry.${id}.ts`;
  const output = `${WORKER_DIR}/worker.${id}.js`;
  let module: string;
  try {
    await Deno.writeTextFile(`${root}/${entry}`, entrySource(files));
    await run(deno, root, [
      "bundle",
      "--quiet",
      "--platform=browser",
      "--format=esm",
      "--minify",
      // The runtime's own module: workerd provides it.
      "--external=cloudflare:workers",
      // Where the ranks were never built, tokens.ts packs them from gpt-tokenizer; this build
      // always builds them, so that fallback (2.4 MB) stays out of the Worker (`withoutFallback`).
      "--external=gpt-tokenizer",
      "--output",
      output,
      entry,
    ]);
    module = withoutFallback(await Deno.readTextFile(`${root}/${output}`));
    await Deno.writeTextFile(`${root}/${output}`, module);
    await Deno.rename(`${root}/${output}`, `${root}/${WORKER_MODULE}`);
  } finally {
    for (const path of [entry, output]) await Deno.remove(`${root}/${path}`).catch(() => {});
  }
  const bytes = new TextEncoder().encode(module);
  const gzip = await compressBytes(bytes, "gzip");
  return { bytes: bytes.length, gzipBytes: gzip.length };
}

/** The dynamic imports of the left-out fallback (`"gpt-tokenizer/..."`), as the bundler leaves them. */
const FALLBACK_IMPORT = /import\("gpt-tokenizer\/[A-Za-z0-9_/]+"\)/g;

/**
 * `module` with the fallback's imports made refusals: workerd (and miniflare's and wrangler's module
 * check) would look for the package, which is not there. They run only where the ranks were never
 * built, which this build rules out.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * const out = withoutFallback('a=import("gpt-tokenizer/bpeRanks/o200k_base");b=import("./x.js")');
 * assert.ok(!out.includes("gpt-tokenizer/"));
 * assert.ok(out.includes('import("./x.js")'));
 * ```
 */
export function withoutFallback(module: string): string {
  return module.replace(
    FALLBACK_IMPORT,
    'Promise.reject(new Error("the token ranks are built into the Worker: no gpt-tokenizer here"))',
  );
}

/** Runs `deno` with `args` in `root`; throws naming the step when it fails. */
async function run(deno: string, root: string, args: string[]): Promise<void> {
  const done = await new Deno.Command(deno, {
    args,
    cwd: root,
    stdout: "inherit",
    stderr: "inherit",
  }).output();
  if (!done.success) throw new Error(`deno ${args[0]} failed (exit ${done.code})`);
}

if (import.meta.main) {
  const root = new URL("../..", import.meta.url).pathname;
  // wrangler.json's vars are what `wrangler deploy` (whose build command this is) uploads: one
  // the Worker cannot run with stops the build, and so the deploy, before the isolate answers 500.
  const wrangler = await readWrangler(root);
  const check = checkDeployment(wrangler, wrangler.vars ?? {}, false);
  if (!reportDeployment(check, "deno task worker:build")) Deno.exit(1);
  const built = await buildWorker(root);
  const kib = (bytes: number) => `${(bytes / 1024).toFixed(0)} KiB`;
  // deno-lint-ignore no-console -- a build step's one line
  console.log(`${WORKER_MODULE}: ${kib(built.bytes)} (${kib(built.gzipBytes)} gzipped)`);
}
