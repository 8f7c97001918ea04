/**
 * `npm start` as an operator and a process manager run it (lib/node/npm_parent.ts, package.json's
 * `exec`): a SIGTERM to npm's process (what `docker stop` sends to `CMD npm start`) leaves nothing
 * answering and no process of it within the drain, with the npm of this machine (11) and the npm
 * Node 24 ships (11.3.0, Node 24.0.0's); npm killed outright (SIGKILL, nothing passed on) still
 * stops the service; and a checkout without `npm ci` refuses to start in one sentence.
 *
 * Real npm processes over the real entry on Node 24: what it guards is process plumbing.
 *
 * @module
 */

import assert from "node:assert/strict";
import { dirname } from "node:path";
import { ensureNodeModules, nodeBinary } from "../_node.ts";
import { freePort, waitForPort } from "../_redis.ts";

const ROOT = new URL("../..", import.meta.url).pathname;

/**
 * How long after the signal nothing may answer and no process remain: the drain (1 s), the stop,
 * and a margin for a busy machine; the check allows 10 s.
 */
const GONE_WITHIN_MS = 8_000;

/** The npm Node 24.0.0 ships (Node 24's line ships npm 11). */
const NODE24_NPM = "11.3.0";

await ensureNodeModules();
const NODE24 = await nodeBinary(24);

/** The CLI script of npm `version`, fetched by npx (once per machine). */
async function npmCli(version: string): Promise<string> {
  const run = await new Deno.Command("npx", {
    args: ["-y", "-p", `npm@${version}`, "-c", 'readlink -f "$(command -v npm)"'],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const path = new TextDecoder().decode(run.stdout).trim();
  assert.ok(run.success && path.endsWith("npm-cli.js"), new TextDecoder().decode(run.stderr));
  return path;
}

/** The npm runs to try: this machine's, on its own Node; Node 24's, on Node 24. */
const NPMS: ReadonlyArray<{ name: string; command: () => Promise<string[]> }> = [
  { name: "this machine's npm", command: () => Promise.resolve(["npm"]) },
  {
    name: `npm ${NODE24_NPM} on Node 24`,
    command: async () => [NODE24, await npmCli(NODE24_NPM)],
  },
];

/** The processes whose parent is `pid`, and theirs (read from /proc). */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(ppid, [...children.get(ppid) ?? [], Number(entry.name)]);
    } catch {
      // Gone meanwhile.
    }
  }
  const found: number[] = [];
  const visit = (parent: number) => {
    for (const child of children.get(parent) ?? []) {
      found.push(child);
      visit(child);
    }
  };
  visit(pid);
  return found;
}

/** Whether process `pid` still runs (a zombie does not). */
function running(pid: number): boolean {
  try {
    return !/\) Z /.test(Deno.readTextFileSync(`/proc/${pid}/stat`));
  } catch {
    return false;
  }
}

/** Whether something answers HTTP on `port`. */
async function answers(port: number): Promise<boolean> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}/robots.txt`);
    await response.body?.cancel();
    return true;
  } catch {
    return false;
  }
}

/** Runs `npm start` with `npm`, Node 24 first on the PATH; once it answers, `signal` to npm. */
async function npmStartThen(npm: string[], signal: Deno.Signal) {
  const port = freePort();
  const child = new Deno.Command(npm[0]!, {
    args: [...npm.slice(1), "start", "--silent"],
    cwd: ROOT,
    env: {
      PATH: `${dirname(NODE24)}:${Deno.env.get("PATH")}`,
      PORT: String(port),
      HOSTNAME: "127.0.0.1",
      PUBLIC_BASE_URL: "http://127.0.0.1",
      ACCESS_LOG: "false",
    },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  let tree: number[] = [];
  try {
    await waitForPort(port, 30_000);
    tree = descendants(child.pid);
    assert.ok(tree.length > 0, "npm runs the service in a process of its own");
    child.kill(signal);
    const signalled = Date.now();
    while (
      Date.now() - signalled < GONE_WITHIN_MS &&
      (tree.some(running) || await answers(port))
    ) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return {
      left: tree.filter(running),
      answering: await answers(port),
      ms: Date.now() - signalled,
      stderr,
    };
  } finally {
    for (const pid of tree.filter(running)) Deno.kill(pid, "SIGKILL");
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
    await child.status;
    await stderr;
  }
}

for (const { name, command } of NPMS) {
  Deno.test(`npm start with ${name}: a SIGTERM to npm leaves nothing answering and no process of it within the drain`, async () => {
    const { left, answering, ms, stderr } = await npmStartThen(await command(), "SIGTERM");
    assert.deepEqual(left, [], `processes left after ${ms} ms:\n${await stderr}`);
    assert.equal(answering, false);
    assert.match(await stderr, /"message":"stopped"/, "the service stopped as on any SIGTERM");
  });
}

Deno.test("npm start: npm killed outright (SIGKILL: nothing passed on) still stops the service, which sees its parent gone", async () => {
  const { left, answering, ms, stderr } = await npmStartThen(["npm"], "SIGKILL");
  assert.deepEqual(left, [], `processes left after ${ms} ms:\n${await stderr}`);
  assert.equal(answering, false);
  assert.match(await stderr, /npm start's npm process is gone/);
});

Deno.test("Node's entry without npm ci: one sentence naming npm ci, exit 1, nothing served", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const copy = await new Deno.Command("cp", {
      args: ["-r", "lib", "static", "package.json", dir],
      cwd: ROOT,
    }).output();
    assert.ok(copy.success);
    const child = new Deno.Command(NODE24, {
      args: [`${dir}/lib/node/main.ts`],
      env: { PORT: "0", HOSTNAME: "127.0.0.1", PUBLIC_BASE_URL: "http://127.0.0.1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    // Bounded: an entry that starts anyway would serve for ever.
    const timer = setTimeout(() => child.kill("SIGKILL"), GONE_WITHIN_MS);
    const run = await child.output();
    clearTimeout(timer);
    const said = new TextDecoder().decode(run.stderr).trim();
    assert.equal(run.code, 1, `exit ${run.code}: ${said}`);
    assert.equal(said.split("\n").length, 1, said);
    assert.match(
      said,
      /^Cannot start: the npm packages .*negotiator.* are not installed, so run npm ci/,
    );
    assert.equal(new TextDecoder().decode(run.stdout), "");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
