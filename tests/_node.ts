/**
 * Node.js for the tests that run the service on Node (`tests/node/`): the LTS binaries from npm
 * (`npx -y node@24`, `node@26`, as a machine with only npm has them) and the project's packages
 * installed by `npm ci` from package-lock.json, as the README's Node commands do.
 *
 * @module
 */

const ROOT = new URL("..", import.meta.url);

/** The Node LTS lines the service supports (lib/node/main.ts). */
export const NODE_LINES = [24, 26] as const;

/** The path of Node `major`'s binary, fetched by npx (once per machine, then from its cache). */
export async function nodeBinary(major: number): Promise<string> {
  const run = await new Deno.Command("npx", {
    args: ["-y", `node@${major}`, "-p", "process.execPath"],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const path = new TextDecoder().decode(run.stdout).trim();
  if (!run.success || path === "") {
    throw new Error(`npx -y node@${major} failed: ${new TextDecoder().decode(run.stderr)}`);
  }
  return path;
}

/**
 * Installs the project's npm packages (`npm ci`, from package-lock.json) when node_modules/ does not
 * hold what the lock names. The machine's npm may run on a Node older than the service accepts
 * (`.npmrc`'s engine-strict, for `npm ci` before `npm start`): the packages install the same, and
 * the postinstall step (the token ranks' file, which that Node could not run) is left to
 * `deno task build:tokens`; without it, counting packs the package's ranks.
 */
export async function ensureNodeModules(): Promise<void> {
  const lock = new URL("package-lock.json", ROOT);
  const installed = new URL("node_modules/.package-lock.json", ROOT);
  try {
    const wanted = JSON.parse(await Deno.readTextFile(lock)).packages;
    const have = JSON.parse(await Deno.readTextFile(installed)).packages;
    const same = Object.keys(wanted).filter((name) => name !== "").every((name) =>
      have[name]?.version === wanted[name].version
    );
    if (same) return;
  } catch {
    // Not installed yet.
  }
  const run = await new Deno.Command("npm", {
    args: ["ci", "--ignore-scripts", "--engine-strict=false", "--no-audit", "--no-fund"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!run.success) {
    throw new Error(`npm ci failed: ${new TextDecoder().decode(run.stderr)}`);
  }
}
