/**
 * The stand-in for the official Deno image, for a machine that cannot pull it: a Debian
 * stable-slim base made with debootstrap from Debian's packages (`debian_slim.sh`), then
 * `deno.Dockerfile` over it with npm's `deno` binary, tagged `docker.io/denoland/deno:<version>`
 * so that `FROM denoland/deno:<version>` in deploy/Dockerfile builds on it unchanged. Each of the
 * two images carries the SHA-256 of its recipe in a label and is rebuilt only when that changes.
 *
 * @module
 */

import { join } from "node:path";
import { sha256Hex } from "../../lib/text/sha256_hex.ts";
import { type Engine, engineOk, firstLine, imageLabels, ULIMITS } from "./engine.ts";

/** The label holding a stand-in image's recipe hash; the official images have none. */
export const RECIPE_LABEL = "discovery.stand-in.recipe";

/** The suite of the official image's base, `debian:stable-slim`. */
export const DEBIAN_SUITE = "stable";

/** Debian's own mirror, which redirects to a nearby one. */
export const DEBIAN_MIRROR = "http://deb.debian.org/debian";

/** The stand-in Debian base's name: ours, not Debian's (`localhost/`). */
export const DEBIAN_IMAGE = `localhost/discovery-stand-in/debian:${DEBIAN_SUITE}-slim`;

const HERE = import.meta.dirname!;

/** A stand-in image, and whether this call built it (false: the cached one was current). */
export interface StandIn {
  /** The image's name. */
  image: string;
  /** Its recipe's hash (the label's value). */
  recipe: string;
  /** Built now, rather than found current. */
  built: boolean;
}

/** The SHA-256, in hex, of `parts` joined by NUL: a recipe's hash. */
function sha256(parts: readonly string[]): Promise<string> {
  return sha256Hex(new TextEncoder().encode(parts.join("\0")));
}

/** The podman-only build options: Docker's image format (it keeps HEALTHCHECK), never a pull. */
export function buildOptions(which: Engine): string[] {
  return which.name === "podman" ? ["--format", "docker", "--pull=never"] : [];
}

/** Why the stand-in cannot be built by this process, or undefined when it can. */
function cannotBuild(): string | undefined {
  if (Deno.uid() !== 0) return "building it needs root (debootstrap): run the task as root";
  const debootstrap = new Deno.Command("sh", {
    args: ["-c", "command -v debootstrap || test -x /usr/sbin/debootstrap"],
    stdout: "null",
    stderr: "null",
  }).outputSync();
  return debootstrap.success ? undefined : "debootstrap is missing: apt-get install debootstrap";
}

/** Says what a long step is doing (the task prints it). */
export type Say = (line: string) => void;

/** The Debian stable-slim base: `debian_slim.sh`'s root file system, imported. */
export async function standInDebian(which: Engine, say: Say): Promise<StandIn> {
  const script = join(HERE, "debian_slim.sh");
  const recipe = await sha256([await Deno.readTextFile(script), DEBIAN_SUITE, DEBIAN_MIRROR]);
  const labels = await imageLabels(which, DEBIAN_IMAGE);
  if (labels?.[RECIPE_LABEL] === recipe) return { image: DEBIAN_IMAGE, recipe, built: false };
  const why = cannotBuild();
  if (why) throw new Error(`the stand-in Debian base cannot be built: ${why}`);
  say(`building ${DEBIAN_IMAGE}: debootstrap of Debian ${DEBIAN_SUITE} (about a minute)`);
  const dir = await Deno.makeTempDir({ prefix: "discovery-debian-" });
  try {
    const tar = join(dir, "rootfs.tar");
    const made = await new Deno.Command("bash", {
      args: [script, DEBIAN_SUITE, DEBIAN_MIRROR, tar],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      env: { PATH: `${Deno.env.get("PATH") ?? ""}:/usr/sbin:/sbin` },
    }).output();
    if (!made.success) {
      const said = new TextDecoder().decode(made.stderr).trimEnd().split("\n").slice(-15);
      throw new Error(`debian_slim.sh failed (exit ${made.code}):\n${said.join("\n")}`);
    }
    await engineOk(which, [
      "import",
      "--change",
      `LABEL ${RECIPE_LABEL}=${recipe}`,
      "--change",
      'CMD ["bash"]',
      tar,
      DEBIAN_IMAGE,
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  return { image: DEBIAN_IMAGE, recipe, built: true };
}

/**
 * The path of npm's `deno` binary of `version` (the running one when it is that version, else
 * the one `npx -y deno@<version>` installs), which Deno publishes with each release.
 */
export async function denoBinary(version: string): Promise<string> {
  if (Deno.version.deno === version) return Deno.execPath();
  const found = await new Deno.Command("npx", {
    args: ["-y", `deno@${version}`, "eval", "console.log(Deno.execPath())"],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const path = new TextDecoder().decode(found.stdout).trim().split("\n").at(-1) ?? "";
  if (!found.success || path === "") {
    const said = firstLine(new TextDecoder().decode(found.stderr));
    throw new Error(`npx -y deno@${version} did not give its binary: ${said}`);
  }
  return path;
}

/**
 * The stand-in `docker.io/denoland/deno:<version>`, built over {@linkcode standInDebian} from
 * `deno.Dockerfile` unless the image there already carries this recipe's hash.
 */
export async function standInDeno(which: Engine, version: string, say: Say): Promise<StandIn> {
  const image = `docker.io/denoland/deno:${version}`;
  const debian = await standInDebian(which, say);
  const files = ["deno.Dockerfile", "docker_entrypoint.sh"];
  const texts = await Promise.all(files.map((file) => Deno.readTextFile(join(HERE, file))));
  const recipe = await sha256([debian.recipe, version, ...texts]);
  const labels = await imageLabels(which, image);
  if (!debian.built && labels?.[RECIPE_LABEL] === recipe) return { image, recipe, built: false };
  say(`building the stand-in ${image} over ${debian.image}`);
  const context = await Deno.makeTempDir({ prefix: "discovery-deno-base-" });
  try {
    // The binary keeps its mode (755) through COPY: no chmod layer of another 95 MB.
    await Deno.copyFile(await denoBinary(version), join(context, "deno"));
    await Deno.chmod(join(context, "deno"), 0o755);
    for (const file of files) await Deno.copyFile(join(HERE, file), join(context, file));
    await engineOk(which, [
      "build",
      ...buildOptions(which),
      ...ULIMITS,
      "--file",
      join(context, "deno.Dockerfile"),
      "--build-arg",
      `DEBIAN_IMAGE=${debian.image}`,
      "--build-arg",
      `DENO_VERSION=${version}`,
      "--build-arg",
      `RECIPE=${recipe}`,
      "--tag",
      image,
      context,
    ]);
  } finally {
    await Deno.remove(context, { recursive: true });
  }
  return { image, recipe, built: true };
}
