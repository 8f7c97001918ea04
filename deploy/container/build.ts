/**
 * `deno task container`: builds deploy/Dockerfile into the image `discovery` with podman (docker
 * where that is there instead), over the official Deno image or, where no registry gives it, a
 * stand-in laid out as it is (`base.ts`). Prints which base was used and how long each step took;
 * a failure is one sentence on stderr and exit code 1.
 *
 * Behind a TLS-intercepting proxy, the build's `deno task build` reaches the npm registry only if
 * it trusts the proxy's CA: the file the host's Deno trusts (`DENO_CERT`, else
 * `NODE_EXTRA_CA_CERTS`, which Deno reads too) is passed as the build secret `deno_cert`, which
 * that one step uses and the image never holds.
 *
 * @module
 */

import { join } from "node:path";
import { denoBase, denoVersionOf } from "./base.ts";
import { type Engine, engineOk, findEngine, ULIMITS } from "./engine.ts";
import { buildOptions } from "./stand_in.ts";
import { messageOf } from "../../lib/text/error_message.ts";

/** The image the task builds, as deploy/README.md and the container test name it. */
export const IMAGE = "discovery";

/** The checkout: the build context (`.dockerignore` keeps it to what the recipe copies). */
export const ROOT = join(import.meta.dirname!, "..", "..");

/** The variables naming a CA file the host's Deno trusts, in the order Deno reads them. */
const CA_VARIABLES = ["DENO_CERT", "NODE_EXTRA_CA_CERTS"] as const;

/**
 * The CA file to pass to the build, or undefined when the host names none. Throws a sentence
 * naming the variable when it names something that is not a readable file.
 */
export function hostCa(): string | undefined {
  for (const name of CA_VARIABLES) {
    const path = Deno.env.get(name);
    if (path === undefined || path === "") continue;
    // The path goes into `--secret id=deno_cert,src=<path>`, whose fields a comma separates.
    if (/[,\n\r]/.test(path)) {
      throw new Error(
        `${name} names ${
          JSON.stringify(path)
        }, a path with a comma or a line break, which a build secret cannot take: give the CA file another path`,
      );
    }
    try {
      if (Deno.statSync(path).isFile) return path;
    } catch {
      // Named but unreadable: said below.
    }
    throw new Error(
      `${name} names ${
        JSON.stringify(path)
      }, which is not a readable file: set it to the PEM file of the CA to trust, or unset it`,
    );
  }
  return undefined;
}

/** Builds deploy/Dockerfile into {@linkcode IMAGE} with `which`, showing the build's steps. */
export async function buildService(which: Engine, ca: string | undefined): Promise<void> {
  await engineOk(which, [
    "build",
    ...buildOptions(which),
    ...ULIMITS,
    ...(ca === undefined ? [] : ["--secret", `id=deno_cert,src=${ca}`]),
    "--file",
    join(ROOT, "deploy", "Dockerfile"),
    "--tag",
    IMAGE,
    ROOT,
  ], { inherit: true });
}

/** Seconds since `start` (a `performance.now()`), to a tenth. */
function since(start: number): string {
  return `${((performance.now() - start) / 1000).toFixed(1)} s`;
}

/** The task: the base, then the service's image, each step timed. */
async function main(): Promise<void> {
  const ca = hostCa();
  const which = await findEngine();
  const version = denoVersionOf(await Deno.readTextFile(join(ROOT, "deploy", "Dockerfile")));
  let start = performance.now();
  // deno-lint-ignore no-console -- the task's progress
  const base = await denoBase(which, version, (line) => console.log(line));
  // deno-lint-ignore no-console -- the task's report
  console.log(`base ${base.image}: ${base.which}; ${since(start)}`);
  start = performance.now();
  await buildService(which, ca);
  const id = (await engineOk(which, ["image", "inspect", "--format", "{{.Id}}", IMAGE])).trim();
  // deno-lint-ignore no-console -- the task's report
  console.log(`image ${IMAGE} (${id.slice(0, 12)}) built with ${which.name}; ${since(start)}`);
}

if (import.meta.main) {
  try {
    await main();
  } catch (error) {
    // deno-lint-ignore no-console -- a failure's one sentence
    console.error(`deno task container: ${messageOf(error)}`);
    Deno.exit(1);
  }
}
