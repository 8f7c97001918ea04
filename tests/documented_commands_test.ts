/**
 * Every command of the four guides (README.md, deploy/README.md, lib/limit/README.md,
 * tests/README.md) run as written (`_documented_commands.ts` finds them), in a fresh clone of the
 * checkout (its uncommitted changes carried over and committed there), inside a network namespace
 * of its own (`unshare -n`: ports 8000, 9000 and 4318 as the guides write them, without meeting
 * another process of the machine). A service (`deno task start`, `deno serve`...) is started,
 * probed once with a GET of `/api/v1/platform` where its JSON `listening` event says, and stopped
 * as an operator would (SIGTERM; Ctrl-C's SIGINT for `deno task dev`, whose watcher waits for a
 * change after its service stops). It fails on a line of the service that is neither JSON nor one
 * of Deno's own that README's "Where each line goes" names, on a missing `listening` or `stopped`
 * event, on an `Uncaught` or a Rust backtrace from any command, on a command that fails, and on a
 * clone left dirty (`git status`). The commands that cannot run here are skipped below, each with
 * why; the few rewrites, likewise.
 *
 * @module
 */

import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import {
  commandGroups,
  type DocumentedCommand,
  GUIDES,
  isService,
} from "./_documented_commands.ts";

const ROOT = join(import.meta.dirname!, "..");

/** Commands not run here, and why. */
const SKIPPED: { pattern: RegExp; why: string }[] = [
  // The whole suite includes this test, and takes about 4 minutes: CI runs it.
  { pattern: /deno(@\S+)? task (test|ok)$/, why: "the whole suite, which CI runs" },
  { pattern: /^deno task bench/, why: "a benchmark of minutes, run by hand (tests/bench)" },
  {
    pattern: /task compile|^unzip denort|DENORT_BIN/,
    why: "needs the denort base, downloaded from dl.deno.land: no internet here",
  },
  {
    pattern: /systemctl|sysctl|journalctl/,
    why: "changes the host's systemd or kernel settings (recipe_test.ts runs the recipe)",
  },
  { pattern: /^docker /, why: "no Docker daemon here" },
  {
    pattern: /^deno task container|^podman /,
    why:
      "builds or runs a container image: root, podman and minutes, and no registry in the namespace; deno task container:test runs the image as documented",
  },
  { pattern: /^apt-get /, why: "installs system packages (.ci/run does)" },
  {
    pattern: /^npm (ci|start|test)\b|npx -y node@/,
    why:
      "npm ci needs the npm registry, outside the namespace: tests/node/node_test.ts installs the lock's packages, starts lib/node/main.ts as npm start does and runs npm test on Node 24 and 26",
  },
  { pattern: /<stop\|handover>/, why: "a template with placeholders; a minutes-long measurement" },
  { pattern: /deno@2\.5\.0/, why: "another Deno version fetched by npx, a check made by hand" },
  { pattern: /^deno run main\.ts --listen$/, why: 'prose shorthand: "and pass the flags"' },
  { pattern: /^deno task start:kv$/, why: "named bare, it refuses without KV_PATH by design" },
  {
    pattern: /local_first_shared_test\.ts/,
    why: "a measurement of about a minute with Redis, run by deno task test",
  },
  // Cloudflare Workers: deploying, logging in, secrets and live logs need an account and the
  // internet; the local development server prints its own lines, and its test runs it on workerd.
  { pattern: /npx (-y )?wrangler/, why: "talks to Cloudflare: an account and the internet" },
  {
    pattern: /^([A-Z_][A-Z0-9_]*=\S*\s+)*deno task worker(\s|$)/,
    why: "the Workers development server on workerd: tests/workers/worker_task_test.ts runs it",
  },
];

/** The rewrites of a command before it runs, and why. */
const REWRITES: { from: RegExp; to: string }[] = [
  // npx would ask the npm registry, outside the namespace; it runs this very binary.
  { from: /^npx -y deno@2\.9\.6 /, to: "deno " },
  // The VM's state folder: the test makes no system folder (STATE is a temporary one).
  { from: /\/var\/lib\/discovery/g, to: "$STATE" },
];

/** Deno's own lines that README's "Where each line goes" lists, once colours are stripped. */
const DENO_LINES = [
  /^Task [\w:-]+ /,
  /^Watcher /,
  /^Download https?:\/\//,
];

/** A crash, whatever printed it. */
const CRASH = /Uncaught|Stack backtrace:|panicked at|RUST_BACKTRACE/;

// deno-lint-ignore no-control-regex
const ANSI = /\x1b\[[0-9;]*m/g;

/** A process of a command, its lines as they come. */
interface Running {
  command: string;
  child: Deno.ChildProcess;
  lines: string[];
  done: Promise<void>;
}

/** The network namespace every command runs in: a holder process's. */
async function namespace(): Promise<{ enter: string[]; close: () => Promise<void> }> {
  const holder = new Deno.Command("unshare", {
    args: ["-n", "sh", "-c", "ip link set lo up && exec sleep 900"],
    stdin: "null",
  }).spawn();
  const enter = ["nsenter", `--net=/proc/${holder.pid}/ns/net`];
  for (let i = 0; i < 100; i++) {
    const up = await new Deno.Command(enter[0]!, {
      args: [...enter.slice(1), "ip", "-o", "addr", "show", "lo"],
      stdout: "piped",
      stderr: "null",
    }).output();
    if (new TextDecoder().decode(up.stdout).includes("127.0.0.1")) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    enter,
    close: async () => {
      holder.kill("SIGKILL");
      await holder.status;
    },
  };
}

/** Runs `args` to its end (bounded) and returns its output; throws when it fails. */
async function run(cmd: string, args: string[], cwd?: string): Promise<string> {
  const out = await new Deno.Command(cmd, {
    args,
    ...(cwd ? { cwd } : {}),
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(60_000),
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(`${cmd} ${args.join(" ")}: ${new TextDecoder().decode(out.stderr)}`);
  }
  return text;
}

/**
 * A clone of the checkout at HEAD with its uncommitted changes and new files carried over and
 * committed there, so that the commands run the code as it is and `git status` starts clean.
 */
async function freshClone(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "documented-commands-" });
  const head = (await run("git", ["-C", ROOT, "rev-parse", "HEAD"])).trim();
  await run("git", ["clone", "--quiet", "--no-checkout", ROOT, dir]);
  await run("git", ["-C", dir, "checkout", "--quiet", head]);
  const changed = (await run("git", ["-C", ROOT, "diff", "--name-only", "HEAD"])).split("\n");
  const added = (await run("git", ["-C", ROOT, "ls-files", "--others", "--exclude-standard"]))
    .split("\n");
  const files = [...changed, ...added].filter((file) => file !== "");
  for (const file of files) {
    try {
      await Deno.mkdir(dirname(join(dir, file)), { recursive: true });
      await Deno.copyFile(join(ROOT, file), join(dir, file));
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
      await Deno.remove(join(dir, file)).catch(() => {});
    }
  }
  if (files.length > 0) {
    await run("git", ["-C", dir, "add", "-A"]);
    const who = ["-c", "user.name=test", "-c", "user.email=test@example.com"];
    await run("git", ["-C", dir, ...who, "commit", "--quiet", "-m", "working tree"]);
  }
  return dir;
}

/** What every command gets: `deno` on PATH (this very binary), the clone, the state folder. */
interface Place {
  enter: string[];
  clone: string;
  env: Record<string, string>;
}

/** Starts `command` in its own process group (so that a signal reaches every process of it). */
function start(place: Place, command: string): Running {
  const child = new Deno.Command(place.enter[0]!, {
    args: [...place.enter.slice(1), "setsid", "bash", "-c", command],
    cwd: place.clone,
    env: place.env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const read = async (stream: ReadableStream<Uint8Array<ArrayBuffer>>) => {
    let pending = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      pending += chunk;
      const parts = pending.split("\n");
      pending = parts.pop()!;
      lines.push(...parts);
    }
    if (pending !== "") lines.push(pending);
  };
  const done = Promise.all([read(child.stdout), read(child.stderr)]).then(() => {});
  return { command, child, lines, done };
}

/**
 * Sends `signal` to the process group of `running`: `nsenter` execs `setsid`, which (not a group
 * leader) makes itself one and execs the shell, so the child's pid is the group's.
 */
async function signalGroup(running: Running, signal: string): Promise<void> {
  await new Deno.Command("kill", {
    args: [`-${signal}`, "--", `-${running.child.pid}`],
    stderr: "null",
  }).output();
}

/** Waits for `running` to end, at most `ms`; kills its group past that. Returns its exit code. */
async function ended(running: Running, ms: number): Promise<number | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  const status = await Promise.race([running.child.status, timeout]);
  clearTimeout(timer);
  if (status === undefined) {
    await signalGroup(running, "KILL");
    await running.child.status;
  }
  await running.done;
  return status?.code;
}

/** The JSON objects among `lines`. */
function jsonEvents(lines: readonly string[]): Record<string, unknown>[] {
  return lines.flatMap((line) => {
    try {
      const value = JSON.parse(line);
      return typeof value === "object" && value !== null ? [value] : [];
    } catch {
      return [];
    }
  });
}

/** The problems of a service's lines: not JSON nor Deno's own, a crash, no listening or stopped. */
function serviceProblems(running: Running): string[] {
  const problems: string[] = [];
  for (const raw of running.lines) {
    const line = raw.replace(ANSI, "");
    if (CRASH.test(line)) problems.push(`crash line: ${line}`);
    else if (jsonEvents([line]).length === 0 && !DENO_LINES.some((re) => re.test(line))) {
      problems.push(`not JSON: ${line}`);
    }
  }
  const events = jsonEvents(running.lines).map((event) => event.message);
  // Ctrl-C ends `deno task dev`'s watcher, which ends the service without waiting for its stop.
  const expected = isDev(running.command) ? ["listening"] : ["listening", "stopped"];
  for (const message of expected) {
    if (!events.includes(message)) problems.push(`no "${message}" event`);
  }
  return problems;
}

/** Waits until `running` logs where it listens (at most 60 s: a first start builds the bundle). */
async function listeningUrl(running: Running): Promise<string | undefined> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const event = jsonEvents(running.lines).find((e) => e.message === "listening");
    if (event) return String(event.address).replace("0.0.0.0", "127.0.0.1");
    const exited = await Promise.race([
      running.child.status.then(() => true),
      new Promise<false>((resolve) => setTimeout(() => resolve(false), 50)),
    ]);
    if (exited) return undefined;
  }
  return undefined;
}

/** GET `/api/v1/platform` from inside the namespace (curl), its status. */
async function probe(place: Place, url: string): Promise<string> {
  const out = await new Deno.Command(place.enter[0]!, {
    args: [
      ...place.enter.slice(1),
      ...["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"],
      `${url}api/v1/platform`,
    ],
    stdout: "piped",
  }).output();
  return new TextDecoder().decode(out.stdout);
}

/** Starts the service `command` and probes it; the problems so far (stopping adds the rest). */
async function startService(place: Place, command: string): Promise<[Running, string[]]> {
  const running = start(place, command);
  const url = await listeningUrl(running);
  if (url === undefined) return [running, ["never logged where it listens"]];
  const status = await probe(place, url);
  // What runs after the first request (the warm-up, half a second later) is run too.
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && !running.lines.some((line) => line.includes('"warmed up'))) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return [running, status === "200" ? [] : [`GET /api/v1/platform answered ${status}`]];
}

/** Whether `command` is `deno task dev`, the watcher. */
function isDev(command: string): boolean {
  return /task (-q )?dev\b/.test(command);
}

/** Stops a service as its operator would; its lines' problems. */
async function stopService(running: Running): Promise<string[]> {
  // `deno task dev`'s watcher outlives its service's SIGTERM: a terminal's Ctrl-C ends both.
  await signalGroup(running, isDev(running.command) ? "INT" : "TERM");
  const code = await ended(running, 15_000);
  return [...serviceProblems(running), ...(code === undefined ? ["did not stop within 15 s"] : [])];
}

/** Runs a command to its end (at most 5 minutes); its problems. */
async function runToEnd(place: Place, command: string): Promise<string[]> {
  const running = start(place, command);
  const code = await ended(running, 300_000);
  const crashes = running.lines.filter((line) => CRASH.test(line.replace(ANSI, "")));
  return [
    ...(code === 0 ? [] : [`exited with ${code ?? "nothing: killed after 5 minutes"}`]),
    ...crashes.map((line) => `crash line: ${line.replace(ANSI, "")}`),
  ].map((problem) => code === 0 ? problem : `${problem}\n${running.lines.slice(-20).join("\n")}`);
}

/** The command as it runs here, or why it does not. */
function prepared(command: DocumentedCommand): { text: string } | { skip: string } {
  const skipped = SKIPPED.find(({ pattern }) => pattern.test(command.text));
  if (skipped) return { skip: skipped.why };
  let text = command.text;
  for (const { from, to } of REWRITES) text = text.replace(from, to);
  return { text };
}

/** Runs one group in order; every problem, each prefixed with its command. */
async function runGroup(place: Place, group: readonly DocumentedCommand[]): Promise<string[]> {
  const problems: string[] = [];
  const background: Running[] = [];
  let service: Running | undefined;
  const stopCurrent = async (name: string) => {
    if (service) problems.push(...(await stopService(service)).map((p) => `${name}: ${p}`));
    service = undefined;
  };
  let serviceName = "";
  // A probe after a service that is not run here has nothing to probe: it is not run either.
  let skippedService = false;
  for (const command of group) {
    const ready = prepared(command);
    if ("skip" in ready) {
      skippedService ||= isService(command.text.replace(/^npx -y deno@\S+ /, "deno "));
      continue;
    }
    if (/\bcurl\b/.test(ready.text) && skippedService && service === undefined) continue;
    if (command.background && !isService(ready.text)) {
      background.push(start(place, ready.text));
      continue;
    }
    if (isService(ready.text)) {
      await stopCurrent(serviceName);
      let found: string[];
      [service, found] = await startService(place, ready.text);
      serviceName = command.text;
      problems.push(...found.map((p) => `${command.text}: ${p}`));
      continue;
    }
    // A probe (curl) with nothing started in its block follows the README's quick start: "Then:".
    if (/\bcurl\b/.test(ready.text) && service === undefined) {
      [service] = await startService(place, "deno task start");
      serviceName = "deno task start (for the curl lines)";
    }
    problems.push(...(await runToEnd(place, ready.text)).map((p) => `${command.text}: ${p}`));
  }
  await stopCurrent(serviceName);
  for (const helper of background) {
    await signalGroup(helper, "TERM");
    await ended(helper, 10_000);
    const crashes = helper.lines.filter((line) => CRASH.test(line.replace(ANSI, "")));
    problems.push(...crashes.map((line) => `${helper.command}: crash line: ${line}`));
  }
  return problems;
}

Deno.test("every command of the four guides runs clean as written, on a fresh clone", async (t) => {
  const clone = await freshClone();
  const state = await Deno.makeTempDir({ prefix: "documented-state-" });
  const ns = await namespace();
  const place: Place = {
    enter: ns.enter,
    clone,
    env: { PATH: `${dirname(Deno.execPath())}:${Deno.env.get("PATH") ?? ""}`, STATE: state },
  };
  try {
    const seen = new Set<string>();
    for (const doc of GUIDES) {
      for (const group of commandGroups(doc, await Deno.readTextFile(join(ROOT, doc)))) {
        const key = group.map((command) => command.text).join("\n");
        if (seen.has(key)) continue;
        seen.add(key);
        const runs = group.filter((command) => !("skip" in prepared(command)));
        const skips = group.map(prepared).filter((p) => "skip" in p) as { skip: string }[];
        await t.step({
          name: `${doc}: ${key}${runs.length === 0 ? ` (ignored: ${skips[0]!.skip})` : ""}`,
          ignore: runs.length === 0,
          async fn() {
            const problems = await runGroup(place, group);
            const status = await run("git", ["-C", clone, "status", "--porcelain"]);
            if (status !== "") problems.push(`left the clone dirty:\n${status}`);
            await run("git", ["-C", clone, "checkout", "--quiet", "."]);
            await run("git", ["-C", clone, "clean", "-fdq"]);
            assert.deepEqual(problems, []);
          },
        });
      }
    }
  } finally {
    await ns.close();
    await Deno.remove(clone, { recursive: true });
    await Deno.remove(state, { recursive: true });
  }
});
