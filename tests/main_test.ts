/**
 * Tests of the entry point as a process: configuration errors stop start-up, the service runs from any
 * working directory (as a compiled binary must), logs one JSON line per request, and shuts down
 * gracefully on SIGTERM. The compile test runs where a denort base is available.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { freePort } from "./_redis.ts";

const ROOT = join(import.meta.dirname!, "..");
const MAIN = join(ROOT, "main.ts");
const PERMISSIONS = ["--allow-net", "--allow-env", `--allow-read=${join(ROOT, "static")}`];

/** Runs `main.ts --listen` to completion with `env`, for start-up failures. */
async function runMain(
  env: Record<string, string>,
  permissions: readonly string[] = PERMISSIONS,
): Promise<{ code: number; stdout: Uint8Array; stderr: string }> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--config", join(ROOT, "deno.json"), ...permissions, MAIN, "--listen"],
    env: { NO_COLOR: "1", ...env },
    stdout: "piped",
    stderr: "piped",
  }).output();
  return {
    code: output.code,
    stdout: output.stdout,
    stderr: new TextDecoder().decode(output.stderr),
  };
}

/** Reads a process's stderr until a JSON "listening" event gives the address. */
async function listeningAddress(
  stream: ReadableStream<Uint8Array<ArrayBuffer>>,
): Promise<{ url: string; rest: Promise<string> }> {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  while (true) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the service exited before listening:\n${seen}`);
    seen += value;
    const match = /"message":"listening","address":"http:\/\/[^:]+:(\d+)\//.exec(seen);
    if (match) {
      const rest = (async () => {
        let more = seen;
        while (true) {
          const next = await reader.read();
          if (next.done) return more;
          more += next.value;
        }
      })();
      return { url: `http://127.0.0.1:${match[1]}`, rest };
    }
  }
}

Deno.test("main.ts refuses bad configuration: every problem listed, exit code 1, nothing served", async () => {
  const output = await runMain({
    PORT: "99999",
    RATE_LIMIT: "none",
    DEPRECATION_DATE: "2027-01-01",
    SUNSET_DATE: "2027-02-01",
  });
  const stderr = output.stderr;
  assert.equal(output.code, 1, stderr);
  assert.match(stderr, /Configuration is invalid \(3 problems\); nothing is served/);
  assert.match(stderr, /PORT must be from 0 to 65535, got 99999/);
  assert.match(stderr, /RATE_LIMIT must be a whole number/);
  assert.match(stderr, /SUNSET_DATE must be at least 90 days after DEPRECATION_DATE/);
  assert.doesNotMatch(stderr, /listening/);
  assert.equal(output.stdout.length, 0);
});

Deno.test("main.ts --listen serves from any working directory, logs without query strings, and stops on SIGTERM", async () => {
  const process = new Deno.Command(Deno.execPath(), {
    args: ["run", ...PERMISSIONS, MAIN, "--listen"],
    cwd: Deno.makeTempDirSync(),
    env: {
      PORT: "0",
      HOSTNAME: "127.0.0.1",
      PUBLIC_BASE_URL: "https://discovery.example.com",
      NO_COLOR: "1",
    },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stdout = new Response(process.stdout).text();
  try {
    const { url, rest } = await listeningAddress(process.stderr);
    const response = await fetch(`${url}/api/v1/platform?secret=do-not-log`);
    assert.equal(response.status, 200);
    assert.equal((await response.json()).openapi, "https://discovery.example.com/openapi.json");
    process.kill("SIGTERM");
    const status = await process.status;
    assert.equal(status.code, 0);
    const log = await stdout;
    const lines = log.trim().split("\n").map((line) => JSON.parse(line));
    assert.equal(lines.length, 1);
    assert.equal(lines[0].path, "/api/v1/platform");
    assert.equal(lines[0].status, 200);
    assert.equal(lines[0].caller, "127.0.0.0");
    assert.doesNotMatch(log, /secret|do-not-log/);
    const events = (await rest).trim().split("\n").map((line) => JSON.parse(line).message);
    assert.deepEqual(events.slice(-2), ["shutting down: finishing requests in flight", "stopped"]);
  } finally {
    try {
      process.kill("SIGKILL");
    } catch { /* already exited */ }
    await process.status;
  }
});

/** The words of `deno task compile`'s `deno compile` command (after the token ranks' build), from deno.json. */
async function compileTask(): Promise<string[]> {
  const deno = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json")));
  return String(deno.tasks.compile).split("&&").at(-1)!.trim().split(/\s+/);
}

/** The permission and unstable flags of `deno task compile`: what the binary is allowed at run time. */
async function compiledFlags(): Promise<string[]> {
  return (await compileTask()).filter((word) => /^--(allow|unstable)-/.test(word));
}

/** Runs `command` (the binary, or `deno run` with its flags) with the KV store in `folder`. */
async function serveWithKv(
  command: string,
  args: string[],
  folder = Deno.makeTempDirSync(),
): Promise<{ kv: string }> {
  const kv = join(folder, "limits.sqlite");
  const service = new Deno.Command(command, {
    args,
    cwd: Deno.makeTempDirSync(),
    env: {
      PORT: "0",
      HOSTNAME: "127.0.0.1",
      PUBLIC_BASE_URL: "http://127.0.0.1",
      RATE_LIMIT_STORE: "kv",
      KV_PATH: kv,
      NO_COLOR: "1",
    },
    stdout: "null",
    stderr: "piped",
  }).spawn();
  try {
    const { url, rest } = await listeningAddress(service.stderr);
    for (const path of ["/developers", "/api/v1/platform"]) {
      const response = await fetch(`${url}${path}`);
      assert.equal(response.status, 200, path);
      assert.equal(response.headers.get("ratelimit-remaining") !== null, true, path);
      if (path === "/developers") assert.match(await response.text(), /<!doctype html>/i);
      else await response.body?.cancel();
    }
    service.kill("SIGTERM");
    assert.equal((await service.status).code, 0);
    const events = (await rest).trim().split("\n").map((line) => JSON.parse(line));
    assert.deepEqual(events.filter((e) => e.level !== "info"), [], "no warning, no error");
    assert.ok(Deno.statSync(kv).isFile, "the KV database is written at KV_PATH");
    return { kv };
  } finally {
    try {
      service.kill("SIGKILL");
    } catch { /* already exited */ }
    await service.status;
  }
}

Deno.test("the compile task's permissions and unstable flags are enough to serve with the KV store at KV_PATH", async () => {
  // The state folder (deploy/discovery@.service's StateDirectory=) mapped to a temporary one;
  // reading also this checkout, whose modules and static/ the binary embeds and reads without a grant.
  const state = Deno.makeTempDirSync();
  const flags = (await compiledFlags()).map((flag) => flag.replaceAll("/var/lib/discovery", state))
    .map((flag) => flag.startsWith("--allow-read=") ? `${flag},${ROOT}` : flag);
  for (const flag of ["--allow-net", `--allow-read=${state},${ROOT}`, `--allow-write=${state}`]) {
    assert.ok(flags.includes(flag), `${flag} in the compile task`);
  }
  assert.ok(flags.includes("--unstable-kv"), "--unstable-kv in the compile task");
  // The same permissions under deno run, from any working directory (the binary cannot be built here
  // without a runtime base; this checks what it will be allowed).
  await serveWithKv(Deno.execPath(), ["run", "--no-prompt", ...flags, MAIN, "--listen"], state);
});

const DENORT = Deno.env.get("DENORT_BIN");
Deno.test({
  name: "deno task compile builds a binary that serves the embedded static files and the KV store",
  // Skipped where no runtime base is available: deno compile downloads denort from the internet.
  ignore: DENORT === undefined,
  async fn() {
    const out = join(Deno.makeTempDirSync(), "discovery");
    // The state folder the binary may read and write, mapped to a temporary one; the embedded
    // static/ is read without a grant.
    const state = Deno.makeTempDirSync();
    const task = (await compileTask()).map((word) => word.replaceAll("/var/lib/discovery", state));
    assert.equal(task[task.indexOf("--output") + 1], "dist/discovery");
    task[task.indexOf("--output") + 1] = out;
    assert.deepEqual(task.slice(0, 2), ["deno", "compile"]);
    const compile = await new Deno.Command(Deno.execPath(), {
      args: task.slice(1),
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(compile.code, 0, new TextDecoder().decode(compile.stderr));
    await serveWithKv(out, [], state);
  },
});
if (DENORT === undefined) {
  // deno-lint-ignore no-console
  console.log(
    "compile test skipped: deno compile needs a denort base for Deno 2.9.6, which is downloaded from dl.deno.land (offline here) and shipped by no npm package; set DENORT_BIN to one to run it",
  );
}

Deno.test("the compile task embeds static/, which the service needs at start-up", async () => {
  const task = (await compileTask()).join(" ");
  assert.match(task, /--include static /);
  assert.match(task, / main\.ts --listen$/);
});

Deno.test("main.ts --listen on a taken port says so in one line and exits 1", async () => {
  const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const output = await runMain({
      PORT: String(taken.addr.port),
      HOSTNAME: "127.0.0.1",
      PUBLIC_BASE_URL: "http://127.0.0.1",
    });
    const stderr = output.stderr;
    assert.equal(output.code, 1, stderr);
    assert.match(
      stderr,
      new RegExp(
        `^Cannot listen on 127\\.0\\.0\\.1:${taken.addr.port}: PORT ${taken.addr.port} is already in use, so stop the process holding it or set PORT to a free port; nothing is served\\.\\n$`,
      ),
    );
  } finally {
    taken.close();
  }
});

Deno.test("main.ts --listen on a taken HEALTH_PORT names HEALTH_PORT in one line and exits 1", async () => {
  const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const port = taken.addr.port;
    const output = await runMain({
      PORT: "0",
      HEALTH_PORT: String(port),
      HOSTNAME: "127.0.0.1",
      PUBLIC_BASE_URL: "http://127.0.0.1",
    });
    assert.equal(output.code, 1, output.stderr);
    assert.equal(
      output.stderr,
      `Cannot listen on 127.0.0.1:${port}: HEALTH_PORT ${port} is already in use, so stop the process holding it or set HEALTH_PORT to a free port; nothing is served.\n`,
    );
  } finally {
    taken.close();
  }
});

Deno.test("under deno serve, HEALTH_PORT is refused at start, exit 1: the runtime owns the listeners", async () => {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["serve", "--host", "127.0.0.1", "--port", String(freePort()), ...PERMISSIONS, MAIN],
    cwd: ROOT,
    env: { PUBLIC_BASE_URL: "http://127.0.0.1", HEALTH_PORT: "8081", NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
    // A service that served instead would never exit: killed, it fails the exit-code check.
    signal: AbortSignal.timeout(20_000),
  }).output();
  const stderr = new TextDecoder().decode(output.stderr);
  assert.equal(output.code, 1, stderr);
  assert.match(stderr, /^ {2}- HEALTH_PORT is served by main\.ts --listen .*unset HEALTH_PORT/m);
  assert.equal(output.stdout.length, 0);
});

Deno.test("main.ts --listen with REUSE_PORT=true but without --unstable-net says so in one line and exits 1", async () => {
  const output = await runMain({
    PORT: "0",
    HOSTNAME: "127.0.0.1",
    PUBLIC_BASE_URL: "http://127.0.0.1",
    REUSE_PORT: "true",
  });
  assert.equal(output.code, 1, output.stderr);
  assert.equal(
    output.stderr,
    "Cannot listen on 127.0.0.1:0: REUSE_PORT=true needs Deno's --unstable-net flag, so add it to the command (deno task start and the compiled binary pass it) or unset REUSE_PORT; nothing is served.\n",
  );
});

Deno.test("under deno serve, SIGTERM still writes the access-log lines waiting in the buffer", async () => {
  const port = freePort();
  const process = new Deno.Command(Deno.execPath(), {
    args: ["serve", "--host", "127.0.0.1", "--port", String(port), ...PERMISSIONS, MAIN],
    cwd: ROOT,
    env: { PUBLIC_BASE_URL: `http://127.0.0.1:${port}`, NO_COLOR: "1" },
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const stdout = new Response(process.stdout).text();
  try {
    let response: Response | undefined;
    for (let attempt = 0; attempt < 100 && response === undefined; attempt++) {
      try {
        response = await fetch(`http://127.0.0.1:${port}/llms.txt?q=hidden`);
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    assert.equal(response?.status, 200);
    await response?.body?.cancel();
    process.kill("SIGTERM");
    assert.equal((await process.status).code, 0);
    const lines = (await stdout).trim().split("\n").filter((line) => line.startsWith("{"));
    assert.deepEqual(lines.map((line) => JSON.parse(line).path), ["/llms.txt"]);
  } finally {
    try {
      process.kill("SIGKILL");
    } catch { /* already exited */ }
    await process.status;
  }
});

/** Asserts a start-up failure: exit 1, nothing on stdout, one line on stderr matching `sentence`. */
function assertOneSentence(
  output: { code: number; stdout: Uint8Array; stderr: string },
  sentence: RegExp,
): void {
  assert.equal(output.code, 1, output.stderr);
  assert.equal(output.stdout.length, 0);
  assert.equal(output.stderr.trimEnd().split("\n").length, 1, output.stderr);
  assert.doesNotMatch(output.stderr, /^\s+at /m);
  assert.match(output.stderr, sentence);
}

const BASE = { PORT: "0", HOSTNAME: "127.0.0.1", PUBLIC_BASE_URL: "http://127.0.0.1" };
const WIDE = ["--allow-net", "--allow-env", "--allow-read", "--allow-write"];

Deno.test("start-up failures are one sentence naming the variable or permission and the fix, exit 1", async (t) => {
  const dir = Deno.makeTempDirSync();
  const cases: {
    name: string;
    env: Record<string, string>;
    permissions?: string[];
    sentence: RegExp;
  }[] = [
    {
      name: "KV_PATH outside what the start task may read and write",
      env: { RATE_LIMIT_STORE: "kv", KV_PATH: join(dir, "limits.sqlite") },
      sentence:
        /^Cannot open KV_PATH .*limits\.sqlite: this process may not read and write .*, so grant --allow-read and --allow-write for that folder \(deno task start:kv and start:parallel grant them for that folder only\) or, for the compiled binary, whose permissions are fixed, set KV_PATH to a file in \/var\/lib\/discovery; nothing is served\.$/m,
    },
    {
      name: "KV_PATH readable but not writable for the process",
      env: { RATE_LIMIT_STORE: "kv", KV_PATH: join(dir, "limits.sqlite") },
      permissions: ["--allow-net", "--allow-env", `--allow-read=${join(ROOT, "static")},${dir}`],
      sentence:
        /^Cannot open KV_PATH .*: this process may not read and write .*deno task start:kv/m,
    },
    {
      name: "KV_PATH in a missing folder",
      env: { RATE_LIMIT_STORE: "kv", KV_PATH: join(dir, "missing", "limits.sqlite") },
      permissions: WIDE,
      sentence:
        /^Cannot open KV_PATH .*: its folder .*missing does not exist or is not a folder, so create it or set KV_PATH to a file in an existing folder; nothing is served\.$/m,
    },
    {
      name: "KV_PATH in a folder where the file cannot be created",
      // Read-only for everyone, root included: a folder of /proc.
      env: { RATE_LIMIT_STORE: "kv", KV_PATH: "/proc/limits.sqlite" },
      // Deno asks for --allow-all before it lets a process write under /proc.
      permissions: ["--allow-all"],
      sentence:
        /^Cannot open KV_PATH \/proc\/limits\.sqlite: the database cannot be created or written there, so give the service's user read and write access to \/proc/m,
    },
    {
      name: "a REDIS_URL the Redis client cannot use",
      env: { RATE_LIMIT_STORE: "redis", REDIS_URL: "redis://127.0.0.1:6379/limits" },
      sentence: /REDIS_URL may name a database number as its path/,
    },
    {
      name: "static/ unreadable",
      env: {},
      permissions: ["--allow-net", "--allow-env"],
      sentence:
        /static\/ \(.*static\) may not be read by this process: grant --allow-read for that folder/,
    },
    {
      name: "no permission to read the environment",
      env: {},
      permissions: ["--allow-net", `--allow-read=${join(ROOT, "static")}`],
      sentence: /^Cannot read the configuration: .*grant --allow-env/m,
    },
    {
      name: "no permission to listen",
      env: {},
      permissions: ["--allow-env", `--allow-read=${join(ROOT, "static")}`],
      sentence:
        /^Cannot listen on 127\.0\.0\.1:0: this process may not use the network, so grant --allow-net/m,
    },
    {
      name: "HOSTNAME not of this machine",
      env: { HOSTNAME: "192.0.2.1" },
      sentence:
        /^Cannot listen on 192\.0\.2\.1:0: HOSTNAME 192\.0\.2\.1 is not an address of this machine/m,
    },
  ];
  for (const { name, env, permissions, sentence } of cases) {
    await t.step(name, async () => {
      const output = await runMain({ ...BASE, ...env }, permissions);
      if (sentence.source.includes("REDIS_URL") || name.startsWith("static")) {
        // Configuration problems keep their list: a header line and one line per problem.
        assert.equal(output.code, 1, output.stderr);
        assert.doesNotMatch(output.stderr, /^\s+at /m);
        assert.equal(output.stderr.trimEnd().split("\n").length, 2, output.stderr);
        assert.match(output.stderr, sentence);
      } else {
        assertOneSentence(output, sentence);
      }
    });
  }
});

Deno.test("no start-up error prints a password, whatever variable holds it", async (t) => {
  const secret = "hunter2";
  const cases: { name: string; env: Record<string, string>; sentence: RegExp }[] = [
    {
      name: "REDIS_URL whose port URL.parse refuses",
      env: {
        RATE_LIMIT_STORE: "redis",
        REDIS_URL: `redis://default:${secret}@redis.internal:637900`,
      },
      sentence: /REDIS_URL must be a redis:\/\/ or rediss:\/\/ URL, got "redis:\/\/default:\*\*\*@/,
    },
    {
      name: "REDIS_URL without a scheme",
      env: { RATE_LIMIT_STORE: "redis", REDIS_URL: `default:${secret}@redis.internal:6379` },
      sentence: /REDIS_URL must be/,
    },
    {
      name: "REDIS_URL with a path the client refuses",
      env: { RATE_LIMIT_STORE: "redis", REDIS_URL: `redis://default:${secret}@127.0.0.1:6379/x` },
      sentence: /REDIS_URL may name a database number/,
    },
    {
      name: "a REDIS_URL list, one entry unparsable",
      env: {
        RATE_LIMIT_STORE: "redis",
        REDIS_TYPE: "cluster",
        REDIS_URL: `redis://u:${secret}@10.0.0.1:7000,redis://u:${secret}@10.0.0.2:99999`,
      },
      sentence: /REDIS_URL must be a comma-separated list/,
    },
    {
      name: "a remote KV_PATH with credentials",
      env: { RATE_LIMIT_STORE: "kv", KV_PATH: `https://u:${secret}@kv.invalid/db` },
      sentence: /KV_PATH/,
    },
    {
      name: "PUBLIC_BASE_URL with credentials",
      env: { PUBLIC_BASE_URL: `https://u:${secret}@example.com` },
      sentence: /PUBLIC_BASE_URL must not carry credentials/,
    },
    {
      name: "a link variable that does not parse",
      env: { SUPPORT_URL: `https://u:${secret}@exa mple.com` },
      sentence: /SUPPORT_URL must be an absolute URI/,
    },
    {
      name: "a link variable with credentials and a wrong scheme",
      env: { DOCUMENTATION_URL: `ftp://u:${secret}@example.com` },
      sentence: /DOCUMENTATION_URL must be an http, https or mailto URI/,
    },
  ];
  for (const { name, env, sentence } of cases) {
    await t.step(name, async () => {
      const output = await runMain({ ...BASE, ...env }, WIDE);
      assert.equal(output.code, 1, output.stderr);
      assert.match(output.stderr, sentence);
      assert.doesNotMatch(output.stderr, new RegExp(secret), output.stderr);
    });
  }
});

/**
 * What a Deno child needs of this environment to find its cache and the registry (`deno task`
 * resolves deno.json's packages before it runs a task): its cache folder, and the certificates and
 * proxy of a machine whose registry is reached through one. The rest is cleared.
 */
const DENO_REACH = [
  "DENO_DIR",
  "HOME",
  "XDG_CACHE_HOME",
  "DENO_CERT",
  "DENO_TLS_CA_STORE",
  "NODE_EXTRA_CA_CERTS",
  "HTTPS_PROXY",
  "HTTP_PROXY",
  "NO_PROXY",
  "NPM_CONFIG_REGISTRY",
];

/** The variables of {@linkcode DENO_REACH} that are set here. */
function denoReach(): Record<string, string> {
  const reach: Record<string, string> = {};
  for (const name of DENO_REACH) {
    const value = Deno.env.get(name);
    if (value !== undefined) reach[name] = value;
  }
  return reach;
}

Deno.test("deno task start:kv with KV_PATH unset refuses to start: it would grant write access to the checkout", async () => {
  // No KV_PATH of this environment may reach the task: its variables are cleared but for the cache's.
  const env: Record<string, string> = { ...denoReach(), ...BASE, NO_COLOR: "1" };
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "start:kv"],
    cwd: ROOT,
    env,
    clearEnv: true,
    // Without the refusal the service would start and listen: end it, and the test fails.
    signal: AbortSignal.timeout(20_000),
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(output.stderr);
  assert.equal(output.code, 1, stderr);
  assert.match(stderr, /^KV_PATH must be set to the database file/m);
  assert.equal(output.stdout.length, 0);
});

Deno.test("deno task start:kv serves on the KV store with read and write granted to KV_PATH's folder only", async () => {
  const deno = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json")));
  assert.doesNotMatch(deno.tasks.start, /allow-write/);
  // The lock is not rewritten at start: a package that does not match it is an error, not a fetch.
  assert.match(deno.tasks.start, /^deno run --frozen .*\$\(deno run --frozen /);
  assert.match(deno.tasks["start:kv"], /--allow-write=\$\(dirname "\$KV_PATH"\) /);
  const dir = Deno.makeTempDirSync();
  const process = new Deno.Command(Deno.execPath(), {
    args: ["task", "--config", join(ROOT, "deno.json"), "start:kv"],
    env: { ...BASE, KV_PATH: join(dir, "limits.sqlite"), ACCESS_LOG: "false", NO_COLOR: "1" },
    stdout: "null",
    stderr: "piped",
  }).spawn();
  try {
    const { url } = await listeningAddress(process.stderr);
    const response = await fetch(`${url}/api/v1/platform`);
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("ratelimit-remaining"), "59");
    await response.body?.cancel();
    assert.ok(Deno.statSync(join(dir, "limits.sqlite")).isFile);
  } finally {
    process.kill("SIGTERM");
    await process.status;
  }
});

Deno.test("under deno serve on a unix socket, main.ts warns once on stderr that callers without an address share one budget", async () => {
  const dir = Deno.makeTempDirSync();
  const socket = join(dir, "discovery.sock");
  const process = new Deno.Command(Deno.execPath(), {
    // Listening on a unix socket needs read and write access to its path.
    args: [
      "serve",
      "--allow-net",
      "--allow-env",
      `--allow-read=${join(ROOT, "static")},${dir}`,
      `--allow-write=${dir}`,
      MAIN,
    ],
    cwd: ROOT,
    env: {
      DENO_SERVE_ADDRESS: `unix:${socket}`,
      PUBLIC_BASE_URL: "https://discovery.example.com",
      ACCESS_LOG: "false",
      NO_COLOR: "1",
    },
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(process.stderr).text();
  const client = Deno.createHttpClient({ proxy: { transport: "unix", path: socket } });
  try {
    const statuses: number[] = [];
    for (let attempt = 0; attempt < 200 && statuses.length < 3; attempt++) {
      try {
        const response = await fetch("http://localhost/llms.txt", { client });
        await response.body?.cancel();
        statuses.push(response.status);
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    assert.deepEqual(statuses, [200, 200, 200]);
    process.kill("SIGTERM");
    await process.status;
    const warnings = (await stderr).split("\n").filter((line) => line.includes("no IP address"));
    assert.equal(warnings.length, 1, await stderr);
    const warning = JSON.parse(warnings[0]!);
    assert.equal(warning.level, "error");
    assert.match(warning.message, /ONE rate-limit budget/);
    assert.match(warning.message, /TRUSTED_PROXIES=unix/);
  } finally {
    client.close();
    try {
      process.kill("SIGKILL");
    } catch { /* already exited */ }
    await process.status;
  }
});

Deno.test("every task that runs the service caps V8's young generation and old-generation growth the same way", async () => {
  const deno = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json")));
  const runners = ["start", "start:kv", "start:parallel", "dev", "compile"];
  const flagsOf = (task: string) =>
    String(deno.tasks[task]).split(/\s+/).filter((word) => word.startsWith("--v8-flags="));
  // The hot caller's peak RSS (tests/bench/README.md, "The hot caller and memory"): V8 would grow
  // each semi-space to 16 MiB. The spray's with a shared store in `exact` (the spray section of
  // tests/bench/README.md): requests waiting for the store survive into the old generation, which V8
  // would let grow to four times what a major GC left (Redis exact peaked at 301–327 MiB, not 192).
  assert.deepEqual(flagsOf("start"), [
    "--v8-flags=--max-semi-space-size=2,--heap-growing-percent=50",
  ]);
  for (const task of runners) assert.deepEqual(flagsOf(task), flagsOf("start"), task);
});
