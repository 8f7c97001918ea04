/**
 * `deno task worker` as a user runs it: the task from deno.json builds the Worker and serves it on
 * workerd at `http://127.0.0.1:$PORT`, the README's quick-start curl lines answer 200 there, and
 * Ctrl-C (SIGINT) stops it, workerd included.
 *
 * @module
 */

import assert from "node:assert/strict";
import { ROOT } from "../_deno_info.ts";
import { rawRequest } from "../_server.ts";
import { freePort } from "../bench/_proc.ts";

/** The curl lines of README's quick start, as words. */
async function quickStartCurls(): Promise<string[][]> {
  const readme = await Deno.readTextFile(`${ROOT}/README.md`);
  const start = readme.indexOf("## Quick start");
  const section = readme.slice(start, readme.indexOf("\n## ", start + 1));
  return section.split("\n").filter((line) => line.startsWith("curl ")).map((line) =>
    (line.match(/'[^']*'|\S+/g) ?? []).map((word) => word.replace(/^'(.*)'$/, "$1"))
  );
}

/**
 * The local addresses of the sockets listening on TCP `port`, from /proc/net/tcp and tcp6 (Linux):
 * IPv4 ones dotted, IPv6 ones as 32 hex digits.
 */
async function listeners(port: number): Promise<string[]> {
  const found: string[] = [];
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    const table = await Deno.readTextFile(file).catch(() => "");
    for (const line of table.split("\n").slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/);
      if (state !== "0A" || local === undefined) continue; // 0A: LISTEN
      const [address, hexPort] = local.split(":");
      if (parseInt(hexPort!, 16) !== port) continue;
      found.push(
        address!.length === 8
          ? address!.match(/../g)!.reverse().map((byte) => parseInt(byte, 16)).join(".")
          : address!,
      );
    }
  }
  return found;
}

/** Reads `stream` until a line contains `text`; the lines read so far on failure. */
async function waitForLine(stream: ReadableStream<Uint8Array>, text: string): Promise<void> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let seen = "";
  try {
    while (!seen.includes(text)) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the task ended before "${text}":\n${seen}`);
      seen += decoder.decode(value, { stream: true });
    }
  } finally {
    reader.releaseLock();
  }
}

Deno.test("deno task worker serves the Worker on workerd at 127.0.0.1:$PORT only, its links naming that address whatever a request's Host, answers README's curl lines, warns of a TRUSTED_PROXIES it takes, and stops on SIGINT, workerd included", async () => {
  const curls = await quickStartCurls();
  assert.ok(curls.length >= 2, `README's quick start has curl lines: ${curls.length}`);
  const port = freePort();
  const task = new Deno.Command(Deno.execPath(), {
    args: ["task", "worker"],
    cwd: ROOT,
    // A proxy of the operator's own in front of Cloudflare: taken on Workers, and warned of.
    env: { PORT: String(port), ACCESS_LOG: "false", TRUSTED_PROXIES: "198.51.100.7" },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(task.stderr).text();
  try {
    await waitForLine(task.stdout, `http://127.0.0.1:${port}`);
    // Listening on 127.0.0.1 only: not a server for the open internet (deploy/README.md).
    assert.deepEqual(await listeners(port), ["127.0.0.1"]);
    // PUBLIC_BASE_URL is the task's own address, whatever the first request's Host says.
    const first = await rawRequest(`http://127.0.0.1:${port}`, "/api/v1/platform", {
      headers: { host: "attacker.example" },
    });
    assert.equal(
      JSON.parse(new TextDecoder().decode(first.body)).openapi,
      `http://127.0.0.1:${port}/openapi.json`,
    );
    for (const words of curls) {
      const args = words.slice(1).map((word) =>
        word.replace(/^http:\/\/localhost:8000(?=\/|$)/, `http://127.0.0.1:${port}`)
      );
      const output = await new Deno.Command("curl", {
        args: ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", ...args],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.equal(new TextDecoder().decode(output.stdout), "200", words.join(" "));
    }
  } finally {
    task.kill("SIGINT");
  }
  await task.status;
  await task.stdout.cancel().catch(() => {});
  // Stopped, workerd with it: nothing answers on the port any more.
  await assert.rejects(fetch(`http://127.0.0.1:${port}/api/v1/platform`));
  assert.match(
    await stderr,
    /^deno task worker: warning: TRUSTED_PROXIES=198\.51\.100\.7\/32 is believed on Workers/m,
  );
});

/**
 * How long a refusal may take: it comes before anything is built (a build and workerd's start take
 * several seconds more), so a task still running then has not refused.
 */
const REFUSAL_MS = 30_000;

/**
 * Runs `deno task <task>` in `cwd` with `env` until it exits: its exit code and stderr. One that
 * has not exited within {@linkcode REFUSAL_MS} is stopped (SIGINT, as Ctrl-C) and the test fails.
 */
async function runTask(task: string, env: Record<string, string>, cwd = ROOT) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", task],
    cwd,
    env,
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"late">((resolve) => timer = setTimeout(resolve, REFUSAL_MS, "late"));
  const ended = await Promise.race([child.status, late]);
  clearTimeout(timer);
  if (ended === "late") {
    child.kill("SIGINT");
    await child.status;
    assert.fail(`deno task ${task} ran on past ${REFUSAL_MS} ms: ${await stderr}`);
  }
  return { code: ended.code, stderr: await stderr };
}

Deno.test("deno task worker refuses, before building or serving, a PUBLIC_BASE_URL with a path and a TRUSTED_PROXIES over Cloudflare's addresses: one sentence each naming the variable, exit 1", async () => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ PUBLIC_BASE_URL: "https://api.example.com/base" }, /PUBLIC_BASE_URL must be an origin/],
    [{ TRUSTED_PROXIES: "2a06:98c0::/29" }, /TRUSTED_PROXIES must not cover Cloudflare's/],
    [{ TRUSTED_PROXIES: "127.0.0.1,::1" }, /TRUSTED_PROXIES must not list loopback/],
  ];
  for (const [env, sentence] of cases) {
    const port = freePort();
    const { code, stderr } = await runTask("worker", { ...env, PORT: String(port) });
    const label = JSON.stringify(env);
    assert.equal(code, 1, `${label}: ${stderr}`);
    assert.match(stderr, sentence, label);
    assert.match(stderr, /^deno task worker: Configuration is invalid \(1 problem\)/m, label);
    assert.ok(!stderr.includes("    at "), `${label}: no stack trace`);
    await assert.rejects(fetch(`http://127.0.0.1:${port}/`), label);
  }
});

Deno.test("deno task worker:build (wrangler deploy's build command) refuses wrangler.json vars the Worker cannot run with, before building, naming the variable", async () => {
  // A copy of what the task reads (its code, the locks, wrangler.json), with a var of its own.
  const root = await Deno.makeTempDir({ prefix: "worker-build-" });
  try {
    await Deno.mkdir(`${root}/tests`);
    for (const path of ["deno.json", "deno.lock", "tests/deno.lock", "lib"]) {
      await new Deno.Command("cp", { args: ["-r", `${ROOT}/${path}`, `${root}/${path}`] }).output()
        .then((done) => assert.ok(done.success, path));
    }
    const wrangler = JSON.parse(await Deno.readTextFile(`${ROOT}/wrangler.json`));
    for (
      const [vars, sentence] of [
        [{ PUBLIC_BASE_URL: "https://api.example.com/base" }, /PUBLIC_BASE_URL must be an origin/],
        [{ TRUSTED_PROXIES: "173.245.48.0/20" }, /TRUSTED_PROXIES must not cover Cloudflare's/],
        [{ RATE_LIMIT: "ten" }, /RATE_LIMIT must be/],
      ] as const
    ) {
      await Deno.writeTextFile(`${root}/wrangler.json`, JSON.stringify({ ...wrangler, vars }));
      const { code, stderr } = await runTask("worker:build", {}, root);
      assert.equal(code, 1, stderr);
      assert.match(stderr, sentence);
      await assert.rejects(Deno.stat(`${root}/dist/worker`), "nothing was built");
    }
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
