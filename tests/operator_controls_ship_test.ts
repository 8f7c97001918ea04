/**
 * The operator controls in each way the Deno service ships, as real processes: `deno task start`,
 * `deno serve`, and main.ts run as Deno Deploy runs it (the caller in `x-deno-client-address`); each
 * with `tests/_controls.ts`' checks, and the lists refused at start in one sentence each. The VM
 * recipe is tests/recipe_test.ts's, the Worker tests/workers/worker_controls_test.ts's.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { checkControls, checkReportMode, CONTROLS_ENV } from "./_controls.ts";
import { DEPLOY_PLATFORM } from "./_deno_deploy_env.ts";
import { freePort } from "./_redis.ts";

const ROOT = join(import.meta.dirname!, "..");
/** Behind a trusted proxy on loopback: the caller is the `X-Forwarded-For` the test sends. */
const PROXIED = { TRUSTED_PROXIES: "127.0.0.1", ACCESS_LOG: "false", NO_COLOR: "1" };
const forwarded = (address: string) => ({ "x-forwarded-for": address });

/** A process of the service, with the JSON events of its stderr. */
interface Running {
  url: string;
  events: Record<string, unknown>[];
  stop(): Promise<void>;
}

/**
 * Runs `args` (a `deno` command line) with `env` in the checkout and waits until it listens: the
 * "listening" event's address, or `port` once it answers.
 */
async function run(args: string[], env: Record<string, string>, port?: number): Promise<Running> {
  const child = new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    env,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const events: Record<string, unknown>[] = [];
  const { promise: listening, resolve } = Promise.withResolvers<string>();
  const reading = (async () => {
    let pending = "";
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      pending += chunk;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      for (const line of lines) {
        try {
          const event = JSON.parse(line);
          events.push(event);
          if (event.message === "listening") {
            resolve(port === undefined ? String(event.address).replace(/\/$/, "") : "");
          }
        } catch {
          events.push({ text: line });
        }
      }
    }
  })();
  const stop = async () => {
    try {
      child.kill("SIGTERM");
    } catch { /* gone */ }
    await child.status;
    await reading;
  };
  const address = await Promise.race([
    listening,
    child.status.then(() => {
      throw new Error(`exited before listening: ${JSON.stringify(events)}`);
    }),
  ]).catch(async (error) => {
    await stop();
    throw error;
  });
  return { url: port === undefined ? address : `http://127.0.0.1:${port}`, events, stop };
}

Deno.test("deno task start: an exempt caller 200 of 200, an ordinary one 60 of 100, a denied one 403; report mode serves and warns on stderr as JSON", async () => {
  const base = {
    PORT: "0",
    HOSTNAME: "127.0.0.1",
    PUBLIC_BASE_URL: "http://127.0.0.1",
    ...PROXIED,
  };
  const service = await run(["task", "--quiet", "start"], { ...base, ...CONTROLS_ENV });
  try {
    await checkControls(service.url, forwarded);
    assert.ok(!service.events.some((e) => e.level === "warn"), JSON.stringify(service.events));
  } finally {
    await service.stop();
  }
  const reporting = await run(["task", "--quiet", "start"], { ...base, RATE_LIMIT_MODE: "report" });
  try {
    await checkReportMode(reporting.url, forwarded);
    const warning = reporting.events.find((e) => e.level === "warn");
    assert.match(
      String(warning?.message),
      /^RATE_LIMIT_MODE=report: the rate limit is NOT enforced/,
    );
  } finally {
    await reporting.stop();
  }
});

Deno.test("deno serve main.ts: the same controls", async () => {
  const port = freePort();
  const service = await run(
    [
      "serve",
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "--allow-net",
      "--allow-env",
      "--allow-read",
      "main.ts",
    ],
    { PUBLIC_BASE_URL: `http://127.0.0.1:${port}`, ...PROXIED, ...CONTROLS_ENV },
    port,
  );
  try {
    await checkControls(service.url, forwarded);
  } finally {
    await service.stop();
  }
});

Deno.test("the service as Deno Deploy runs it (deno.json's deploy build and entrypoint): the same controls, the caller the platform passes", async () => {
  const deploy = JSON.parse(Deno.readTextFileSync(join(ROOT, "deno.json"))).deploy as {
    build: string;
    runtime: { entrypoint: string; args?: string[] };
  };
  const [command, ...buildArgs] = deploy.build.trim().split(/\s+/);
  assert.equal(command, "deno");
  const built = await new Deno.Command(Deno.execPath(), { args: buildArgs, cwd: ROOT }).output();
  assert.ok(built.success, new TextDecoder().decode(built.stderr));
  const port = freePort();
  const service = await run(
    ["run", "-A", deploy.runtime.entrypoint, ...(deploy.runtime.args ?? [])],
    {
      ...DEPLOY_PLATFORM,
      DENO_SERVE_ADDRESS: `tcp:127.0.0.1:${port}`,
      ACCESS_LOG: "false",
      NO_COLOR: "1",
      ...CONTROLS_ENV,
    },
    port,
  );
  try {
    await checkControls(
      service.url,
      (address) => ({ "x-deno-client-address": `${address}:40000` }),
    );
  } finally {
    await service.stop();
  }
});

Deno.test("main.ts refuses an IPv6 entry narrower than /64, and an exempt range overlapping TRUSTED_PROXIES, in one sentence each", async () => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [
      { RATE_LIMIT_EXEMPT: "2001:db8::1/128" },
      /^ {2}- RATE_LIMIT_EXEMPT may not list 2001:db8::1\/128: [^\n]*\/64[^\n]*$/m,
    ],
    [
      { TRUSTED_PROXIES: "10.0.0.0/8", RATE_LIMIT_EXEMPT: "10.1.2.3" },
      /^ {2}- RATE_LIMIT_EXEMPT may not name a trusted proxy \(10\.1\.2\.3\/32 overlaps TRUSTED_PROXIES' 10\.0\.0\.0\/8\): [^\n]*$/m,
    ],
  ];
  for (const [env, sentence] of cases) {
    const output = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-net", "--allow-env", "--allow-read", "main.ts", "--listen"],
      cwd: ROOT,
      env: { PORT: "0", PUBLIC_BASE_URL: "http://127.0.0.1", NO_COLOR: "1", ...env },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(output.stderr);
    assert.equal(output.code, 1, stderr);
    assert.equal(output.stdout.length, 0);
    assert.match(stderr, /^Configuration is invalid \(1 problem\); nothing is served:$/m);
    assert.match(stderr, sentence);
    assert.equal(stderr.trimEnd().split("\n").length, 2, stderr);
  }
});
