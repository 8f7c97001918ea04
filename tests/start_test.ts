/**
 * `deno task start` as an operator runs it, on a fresh copy of the checkout: with an empty Deno
 * cache it fetches only the packages serving needs (none that only tests or benchmarks import), and
 * run by another user who may only read the checkout (`nobody`, through `setpriv`) it serves: from
 * the sources with one warning line when no bundle was built, from the bundle once the owner ran
 * `deno task build`, with a Deno cache it may only read as well (deploy/Dockerfile's steps).
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";

const ROOT = join(import.meta.dirname!, "..");
/** What a checkout needs to start (no `dist/`: a fresh clone has none). */
const CHECKOUT = ["main.ts", "deno.json", "deno.lock", "package.json", "lib", "static"];
/** How long a start may take: an empty cache fetches packages and transpiles. */
const START_WAIT_MS = 60_000;

/** What `deno info --json main.ts` says of npm: main.ts's npm imports, and every package known. */
interface NpmInfo {
  modules: Array<{ specifier: string }>;
  npmPackages: Record<string, { name: string; dependencies?: string[] }>;
}

/**
 * The npm packages serving may load: those main.ts's module graph imports (dynamic imports
 * included) and their dependencies, by name, plus `@esbuild`, which `deno bundle` fetches to build.
 */
async function servingPackages(): Promise<Set<string>> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", "main.ts"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(output.success, new TextDecoder().decode(output.stderr));
  const info = JSON.parse(new TextDecoder().decode(output.stdout)) as NpmInfo;
  const ids = Object.keys(info.npmPackages);
  const queue = info.modules.filter((m) => m.specifier.startsWith("npm:/")).map((m) => {
    const id = m.specifier.slice(5).replace(/^(@?[^@/]+(?:\/[^@/]+)?@[^/]+).*$/, "$1");
    return ids.find((key) => key === id || key.startsWith(`${id}_`))!;
  });
  assert.ok(queue.length > 0, "main.ts imports no npm package: nothing to compare with");
  const names = new Set(["@esbuild"]);
  for (const id of queue) {
    const pkg = info.npmPackages[id]!;
    if (names.has(pkg.name)) continue;
    names.add(pkg.name);
    queue.push(...pkg.dependencies ?? []);
  }
  return names;
}

/** A copy of the checkout in a new folder owned by root that only root may write. */
function freshCheckout(): string {
  const dir = Deno.makeTempDirSync({ prefix: "discovery-checkout-" });
  const copy = new Deno.Command("cp", { args: ["-r", ...CHECKOUT, dir], cwd: ROOT }).outputSync();
  assert.ok(copy.success, new TextDecoder().decode(copy.stderr));
  new Deno.Command("chmod", { args: ["-R", "a+rX,go-w", dir] }).outputSync();
  return dir;
}

/** A started `deno task start`: its stderr lines so far, its address once listening, and stop. */
interface Started {
  lines: string[];
  url: string;
  stop(): Promise<void>;
}

/** Runs `command` (ending in `deno task start`) in `cwd` and waits until the service listens. */
async function startTask(command: string[], cwd: string, env: Record<string, string>) {
  const child = new Deno.Command(command[0]!, {
    args: command.slice(1),
    cwd,
    env: { PORT: "0", HOSTNAME: "127.0.0.1", PUBLIC_BASE_URL: "http://127.0.0.1", ...env },
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
    if (pending) lines.push(pending);
  })();
  let exited = false;
  const status = child.status.then((s) => (exited = true, s));
  const stop = async () => {
    if (!exited) child.kill("SIGTERM");
    await status;
    await reading;
  };
  const deadline = Date.now() + START_WAIT_MS;
  while (Date.now() < deadline && !exited) {
    const listening = lines.map(parseJson).find((line) => line?.message === "listening");
    if (listening) {
      return { lines, url: String(listening.address).replace(/\/$/, ""), stop } as Started;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await stop();
  assert.fail(`deno task start did not listen (exit: ${exited}):\n${lines.join("\n")}`);
}

function parseJson(line: string): Record<string, unknown> | undefined {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

/** What the process of the service answers to a GET (status only). */
async function status(url: string, headers: Record<string, string> = {}): Promise<number> {
  const response = await fetch(url, { headers });
  await response.body?.cancel();
  return response.status;
}

Deno.test("deno task start with an empty Deno cache fetches no package that only tests use", async () => {
  const checkout = freshCheckout();
  const denoDir = Deno.makeTempDirSync({ prefix: "discovery-deno-dir-" });
  const service = await startTask([Deno.execPath(), "task", "start"], checkout, {
    PATH: Deno.env.get("PATH") ?? "",
    HOME: denoDir,
    DENO_DIR: denoDir,
    NO_COLOR: "1",
  });
  try {
    // An Accept that needs the negotiator package, and a page: what serving fetches, it has.
    const accept = "text/markdown;q=0.9, application/json;q=0.5";
    assert.equal(await status(`${service.url}/api/v1/platform`, { accept }), 200);
    assert.equal(await status(`${service.url}/developers`), 200);
  } finally {
    await service.stop();
  }
  const registry = join(denoDir, "npm", "registry.npmjs.org");
  const fetched = [...Deno.readDirSync(registry)].flatMap((entry) =>
    entry.name.startsWith("@")
      ? [...Deno.readDirSync(join(registry, entry.name))].map((e) => `${entry.name}/${e.name}`)
      : [entry.name]
  );
  const serving = await servingPackages();
  assert.ok(fetched.includes("negotiator"), `fetched: ${fetched}`);
  const allowed = (name: string) => serving.has(name) || serving.has(name.split("/")[0]!);
  assert.deepEqual(fetched.filter((name) => !allowed(name)), [], `serving needs: ${[...serving]}`);
});

const notRoot = Deno.uid() !== 0 ? "not run as root: cannot switch to another user" : undefined;
const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((path) => {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
});
const cannotSwitch = notRoot ?? (setpriv ? undefined : "setpriv (util-linux) is not installed");

/** A folder with the running `deno` in it that `nobody` may execute (a hard link, else a copy). */
function denoForNobody(): string {
  const dir = Deno.makeTempDirSync({ prefix: "discovery-bin-" });
  Deno.chmodSync(dir, 0o755);
  try {
    Deno.linkSync(Deno.execPath(), join(dir, "deno"));
  } catch {
    Deno.copyFileSync(Deno.execPath(), join(dir, "deno"));
  }
  Deno.chmodSync(join(dir, "deno"), 0o755);
  return dir;
}

/** `setpriv`'s arguments that run a command as `nobody`, with no supplementary groups. */
const AS_NOBODY = ["--reuid=nobody", "--regid=nogroup", "--clear-groups"];

/** The environment `nobody` starts with: `bin`'s deno first, no home, `denoDir` as its cache. */
function nobodyEnv(bin: string, denoDir: string): Record<string, string> {
  return { PATH: `${bin}:/usr/bin:/bin`, HOME: "/nonexistent", DENO_DIR: denoDir, NO_COLOR: "1" };
}

Deno.test({
  name: `deno task start serves as a user who may only read the checkout${
    cannotSwitch ? ` (ignored: ${cannotSwitch})` : ""
  }`,
  ignore: cannotSwitch !== undefined,
  async fn() {
    const checkout = freshCheckout();
    const bin = denoForNobody();
    // The service account's own cache, as an operator gives it one (the checkout is not its).
    const denoDir = Deno.makeTempDirSync({ prefix: "discovery-nobody-" });
    new Deno.Command("chown", { args: ["nobody:nogroup", denoDir] }).outputSync();
    const asNobody = [setpriv!, ...AS_NOBODY, "deno"];
    const env = nobodyEnv(bin, denoDir);

    // No bundle, and nobody may write one: the sources, with one warning line naming the fix.
    const fromSources = await startTask([...asNobody, "task", "start"], checkout, env);
    try {
      // Pages and Markdown too: the sources import their lazy modules from lib/, which the task
      // grants only when it runs them.
      assert.equal(await status(`${fromSources.url}/api/v1/platform`), 200);
      assert.equal(await status(`${fromSources.url}/developers`), 200);
      assert.equal(await status(`${fromSources.url}/`, { accept: "text/markdown" }), 200);
    } finally {
      await fromSources.stop();
    }
    const said = fromSources.lines.map(parseJson);
    const warnings = said.filter((line) => line?.level === "warn");
    assert.equal(warnings.length, 1, fromSources.lines.join("\n"));
    // The build's own reason, not the echo of its first task.
    assert.match(
      String(warnings[0]!.message),
      /cannot be built here \((?!Task )[^)]*\).*deno task build/,
    );
    assert.deepEqual(
      said.filter((line) => line?.level === "error"),
      [],
      fromSources.lines.join("\n"),
    );
    assert.doesNotMatch(fromSources.lines.join("\n"), /backtrace|panicked/i);

    // The owner builds at install time: the same user then starts the bundle, with no warning.
    const build = new Deno.Command(Deno.execPath(), {
      args: ["task", "--quiet", "build"],
      cwd: checkout,
      env: { DENO_DIR: denoDir },
      stdout: "null",
      stderr: "piped",
    }).outputSync();
    assert.ok(build.success, new TextDecoder().decode(build.stderr));
    // As in deploy/Dockerfile: the checkout and now the cache too are root's, readable only.
    new Deno.Command("chown", { args: ["-R", "root:root", denoDir] }).outputSync();
    new Deno.Command("chmod", { args: ["-R", "a+rX,go-w", checkout, denoDir] }).outputSync();
    // And, as under `docker run --read-only`, no writable temporary folder either.
    const readOnlyTmp = { ...env, TMPDIR: denoDir };
    const fromBundle = await startTask([...asNobody, "task", "start"], checkout, readOnlyTmp);
    try {
      assert.equal(await status(`${fromBundle.url}/api/v1/platform`), 200);
    } finally {
      await fromBundle.stop();
    }
    assert.deepEqual(
      fromBundle.lines.map(parseJson).filter((line) => line?.level === "warn"),
      [],
      fromBundle.lines.join("\n"),
    );
  },
});

Deno.test({
  name:
    `deno task start with an empty Deno cache its user may not write stops in Deno, before any of the service's code, as deploy/README.md says${
      cannotSwitch ? ` (ignored: ${cannotSwitch})` : ""
    }`,
  ignore: cannotSwitch !== undefined,
  async fn() {
    const checkout = freshCheckout();
    const bin = denoForNobody();
    // root's, empty, and only readable by nobody.
    const denoDir = Deno.makeTempDirSync({ prefix: "discovery-empty-" });
    Deno.chmodSync(denoDir, 0o755);
    const child = new Deno.Command(setpriv!, {
      args: [...AS_NOBODY, "deno", "task", "start"],
      cwd: checkout,
      env: { ...nobodyEnv(bin, denoDir), PORT: "0", HOSTNAME: "127.0.0.1" },
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const timer = setTimeout(() => child.kill("SIGKILL"), START_WAIT_MS);
    const { code, stderr } = await child.output();
    clearTimeout(timer);
    const said = new TextDecoder().decode(stderr);
    assert.equal(code, 1, said);
    // `deno task` caches every package deno.json and deno.lock name before it runs the task's first
    // command (cli/tools/task.rs, maybe_npm_install): the entry picker, which would warn about the
    // missing bundle, never runs, so the service cannot say this in its own words. Should a Deno
    // let the task run first, this fails, and lib/build/entry.ts is where the sentence goes.
    assert.match(said, /^error: Failed caching npm package '[^']+'$/m);
    assert.match(said, /Permission denied/);
    assert.doesNotMatch(said, /"level":"warn"/);
    assert.match(
      Deno.readTextFileSync(join(ROOT, "deploy", "README.md")),
      /`error: Failed caching npm package '<name>@<version>'`/,
    );
  },
});
