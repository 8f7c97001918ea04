/**
 * The base image deploy/Dockerfile builds on, `denoland/deno:<version>`: the official image when
 * the registry gives it (a pull is tried first, bounded), the official image already here when
 * the pull fails, and otherwise the stand-in built from Debian's packages and npm's `deno`
 * (`stand_in.ts`). Says which, and why.
 *
 * @module
 */

import { type Engine, engine, firstLine, imageLabels } from "./engine.ts";
import { RECIPE_LABEL, type Say, standInDeno } from "./stand_in.ts";

/**
 * How long the pull may take: enough for the official image (about 70 MB compressed) on a modest
 * link; an unreachable registry fails far sooner (no such host: 0.04 s here).
 */
export const PULL_TIMEOUT_MS = 60_000;

/** The base found or built, and which it is. */
export interface Base {
  /** The image's full name (`docker.io/denoland/deno:<version>`). */
  image: string;
  /** Which image it is and why, for the task's output. */
  which: string;
  /** True for the stand-in. */
  standIn: boolean;
}

/** The version of `FROM denoland/deno:<version>` in `dockerfile` (deploy/Dockerfile's text). */
export function denoVersionOf(dockerfile: string): string {
  const from = /^FROM\s+(?:docker\.io\/)?denoland\/deno:(\d+\.\d+\.\d+)\s*$/m.exec(dockerfile);
  if (!from) throw new Error("deploy/Dockerfile does not start FROM denoland/deno:<version>");
  return from[1]!;
}

/**
 * The base `denoland/deno:<version>`: pulled, else the official one here, else the stand-in, whose
 * long steps are told to `say`.
 */
export async function denoBase(which: Engine, version: string, say: Say): Promise<Base> {
  const image = `docker.io/denoland/deno:${version}`;
  const pull = await engine(which, ["pull", "--quiet", image], { timeoutMs: PULL_TIMEOUT_MS });
  if (pull.code === 0) return { image, which: "the official image, pulled now", standIn: false };
  const failed = pull.code === 124
    ? `the pull did not end in ${PULL_TIMEOUT_MS / 1000} s`
    : `the pull failed: ${firstLine(pull.stderr)}`;
  const labels = await imageLabels(which, image);
  if (labels !== undefined && !(RECIPE_LABEL in labels)) {
    return { image, which: `the official image, pulled before (${failed})`, standIn: false };
  }
  const standIn = await standInDeno(which, version, say);
  const how = standIn.built ? "built now" : "cached, its recipe unchanged";
  return {
    image,
    which: `the stand-in from Debian stable and npm's deno ${version}, ${how} (${failed})`,
    standIn: true,
  };
}
