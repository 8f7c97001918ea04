/**
 * The command `npm start` runs (package.json's `start` script), as the environment it sets, the
 * Node options it passes and the entry, for benchmarks that start the Node service as `npm start`
 * does without npm's own process in between (whose memory is not the service's).
 *
 * @module
 */

/** `npm start`'s command, split. */
export interface NpmStart {
  /** Variables the script sets before `node` (`NAME=value`). */
  env: Record<string, string>;
  /** The options given to Node before the entry. */
  nodeArgs: string[];
  /** The entry and its arguments. */
  entry: string[];
}

/**
 * Splits package.json's `start` script at `root`: `[NAME=value...] [exec] node [options...] entry`,
 * words split on blanks (the script uses no quoting). Throws on any other shape, so that a changed
 * script is not silently benchmarked as something else.
 */
export async function npmStart(root: string): Promise<NpmStart> {
  const pkg = JSON.parse(await Deno.readTextFile(`${root}package.json`));
  const script: string = pkg.scripts.start;
  const words = script.trim().split(/\s+/);
  const env: Record<string, string> = {};
  for (;;) {
    if (words[0] === "exec") {
      words.shift();
    } else if (/^[A-Z_][A-Z0-9_]*=/.test(words[0] ?? "")) {
      const [name, ...value] = words.shift()!.split("=");
      env[name!] = value.join("=");
    } else {
      break;
    }
  }
  if (words.shift() !== "node") throw new Error(`npm start is not a node command: ${script}`);
  const at = words.findIndex((word) => !word.startsWith("-"));
  if (at === -1) throw new Error(`npm start names no entry: ${script}`);
  return { env, nodeArgs: words.slice(0, at), entry: words.slice(at) };
}
