/**
 * Builds the Worker (`deno task worker:build`): one ES module, `dist/worker/worker.js`, that
 * Cloudflare (wrangler) and workerd (miniflare) run as it is.
 *
 * The bundler is Deno's own (`deno bundle --platform=browser`, esbuild inside): it resolves the
 * project's import map and npm packages as `deno task start` does, so there is no second resolver
 * to keep in step and nothing to install. `static/` is embedded: the build writes an entry module
 * (`dist/worker/entry.ts`, not committed) holding each static file's text and handing it to
 * `createWorker`, beside the Durable Object class the Worker exports. Dynamic imports (negotiator,
 * marked) are bundled in, so the Worker is one file. Prints the bundle's size and its gzip size.
 *
 * @module
 */

import { STATIC_DIR, STATIC_FILES } from "../pages/content.ts";
import { compressBytes } from "../http/representation.ts";

/** Where the build writes, relative to the project's root. */
export const WORKER_DIR = "dist/worker";

/** The Worker module wrangler.jsonc and miniflare load. */
export const WORKER_MODULE = `${WORKER_DIR}/worker.js`;

/** The entry module: the static files' texts and the Worker's exports. */
function entrySource(files: Record<string, string>): string {
  return [
    "// Written by lib/workers/build.ts: the Worker's entry, static/ embedded. Not committed.",
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
  await Deno.mkdir(`${root}/${WORKER_DIR}`, { recursive: true });
  await Deno.writeTextFile(`${root}/${WORKER_DIR}/entry.ts`, entrySource(files));
  const bundled = await new Deno.Command(deno, {
    args: [
      "bundle",
      "--quiet",
      "--platform=browser",
      "--format=esm",
      "--minify",
      // The runtime's own module: workerd provides it.
      "--external=cloudflare:workers",
      "--output",
      WORKER_MODULE,
      `${WORKER_DIR}/entry.ts`,
    ],
    cwd: root,
    stdout: "inherit",
    stderr: "inherit",
  }).output();
  if (!bundled.success) throw new Error(`deno bundle failed (exit ${bundled.code})`);
  const bytes = await Deno.readFile(`${root}/${WORKER_MODULE}`);
  const gzip = await compressBytes(bytes, "gzip");
  return { bytes: bytes.length, gzipBytes: gzip.length };
}

if (import.meta.main) {
  const root = new URL("../..", import.meta.url).pathname;
  const built = await buildWorker(root);
  const kib = (bytes: number) => `${(bytes / 1024).toFixed(0)} KiB`;
  // deno-lint-ignore no-console -- a build step's one line
  console.log(`${WORKER_MODULE}: ${kib(built.bytes)} (${kib(built.gzipBytes)} gzipped)`);
}
