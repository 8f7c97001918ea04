/**
 * Finding the system tools some tests run (nginx, systemd-analyze). Outside CI a machine without one
 * skips those tests (with the reason in the test's name); in CI (`CI=true`) its absence is a
 * failure, because `.ci/run` installs them.
 *
 * @module
 */

/** Folders searched besides PATH: Debian puts nginx in /usr/sbin, which a user's PATH may lack. */
const SBIN = ["/usr/sbin", "/sbin"];

/** The path of `name` on PATH or in an sbin folder, or undefined. */
export function findTool(name: string): string | undefined {
  const dirs = [...(Deno.env.get("PATH")?.split(":") ?? []), ...SBIN];
  for (const dir of dirs) {
    try {
      if (Deno.statSync(`${dir}/${name}`).isFile) return `${dir}/${name}`;
    } catch {
      // Not in this folder.
    }
  }
  return undefined;
}

/**
 * Why the tests of `name` cannot run here, or undefined when they can. Throws in CI.
 *
 * @param pkg the Debian package that provides it
 */
export function toolUnavailableReason(name: string, pkg: string): string | undefined {
  if (findTool(name) !== undefined) return undefined;
  if (Deno.env.get("CI") === "true") {
    throw new Error(`${name} is not installed, and CI must run its tests (apt-get install ${pkg})`);
  }
  return `${name} is not installed (apt-get install ${pkg})`;
}
