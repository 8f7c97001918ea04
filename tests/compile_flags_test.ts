/**
 * The compiled binary's permissions are scoped (issue 31, item 8): `deno task compile` bakes its
 * flags into the binary, so each of `--allow-read`, `--allow-write` and `--allow-env` names what the
 * service uses: the unit's state folder (`StateDirectory=discovery`, /var/lib/discovery) and the
 * variables it reads. `deno compile` needs a runtime base downloaded from the internet, so the same
 * flags are checked under `deno run` (the state folder mapped to a temporary one, as
 * tests/recipe_test.ts maps `StateDirectory=`); the binary reads its embedded files without a grant.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { ENV_NAMES } from "../lib/config/env.ts";
import { startService } from "./_service_process.ts";

const ROOT = join(import.meta.dirname!, "..");
/** The unit's state folder, the only one the binary may write. */
const STATE_DIR = "/var/lib/discovery";
/**
 * Variables read besides lib/config/'s: main.ts (`DENO_AUTO_SERVE`, `DENO_DEPLOY`),
 * lib/server/deno_deploy.ts, lib/telemetry/enabled.ts, and npm:@redis/client through `process.env`
 * (an unlisted read throws NotCapable).
 */
const OTHER_ENV = [
  "DENO_AUTO_SERVE",
  "DENO_DEPLOY",
  "DENO_DEPLOY_APP_SLUG",
  "DENO_DEPLOY_ORG_SLUG",
  "DENO_TIMELINE",
  "OTEL_EXPORTER_OTLP_TIMEOUT",
  "REDIS_DEBUG_MAINTENANCE",
  "REDIS_EMIT_DIAGNOSTICS",
];

/** The permission, unstable and V8 flags of deno.json's `compile` task. */
function compileFlags(): string[] {
  const task = JSON.parse(Deno.readTextFileSync(join(ROOT, "deno.json"))).tasks.compile as string;
  return task.split(/\s+/).filter((flag) => /^--(allow-|unstable-|v8-flags=)/.test(flag));
}

/** The values of `--name=a,b`, or undefined when the flag is bare or absent. */
function scope(flags: string[], name: string): string[] | undefined {
  const flag = flags.find((word) => word === name || word.startsWith(`${name}=`));
  assert.ok(flag !== undefined, `${name} in the compile task`);
  return flag === name ? undefined : flag.slice(name.length + 1).split(",");
}

/**
 * The compile task's flags for `deno run`: the state folder mapped to `stateDir`, reading also this
 * checkout (the modules the binary embeds).
 */
function runFlags(stateDir: string): string[] {
  return compileFlags().map((flag) => flag.replaceAll(STATE_DIR, stateDir))
    .map((flag) => flag.startsWith("--allow-read=") ? `${flag},${ROOT}` : flag);
}

Deno.test("the compile task scopes reading and writing to the state folder and names every variable", () => {
  const flags = compileFlags();
  assert.deepEqual(scope(flags, "--allow-write"), [STATE_DIR]);
  assert.deepEqual(scope(flags, "--allow-read"), [STATE_DIR]);
  assert.deepEqual(
    scope(flags, "--allow-env")?.toSorted(),
    [...ENV_NAMES, ...OTHER_ENV].toSorted(),
  );
});

Deno.test("with the compile task's flags the service keeps its KV limit in the state folder and stops on SIGTERM", async () => {
  const stateDir = Deno.makeTempDirSync();
  const kv = join(stateDir, "limits.sqlite3");
  const service = await startService(
    { RATE_LIMIT_STORE: "kv", KV_PATH: kv, RATE_LIMIT: "2" },
    30_000,
    {
      flags: runFlags(stateDir),
    },
  );
  let stopped = false;
  try {
    const statuses = [];
    for (let i = 0; i < 3; i++) {
      const response = await fetch(`${service.url}/api/v1/platform`);
      await response.body?.cancel();
      statuses.push(response.status);
    }
    assert.deepEqual(statuses, [200, 200, 429]);
    await service.stop();
    stopped = true;
    assert.equal(await service.exited, 0);
    assert.ok(Deno.statSync(kv).isFile, "the KV database is written at KV_PATH");
    assert.deepEqual(service.events.filter((e) => e.level !== "info"), [], "no warning, no error");
  } finally {
    if (!stopped) await service.stop();
  }
});

Deno.test("with the compile task's flags a KV_PATH outside the state folder fails at start in one sentence", async () => {
  const stateDir = Deno.makeTempDirSync();
  const elsewhere = join(Deno.makeTempDirSync(), "limits.sqlite3");
  const { code, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", ...runFlags(stateDir), join(ROOT, "main.ts"), "--listen"],
    cwd: stateDir,
    env: {
      PORT: "0",
      HOSTNAME: "127.0.0.1",
      PUBLIC_BASE_URL: "http://127.0.0.1",
      RATE_LIMIT_STORE: "kv",
      KV_PATH: elsewhere,
      NO_COLOR: "1",
    },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).output();
  assert.equal(code, 1);
  const output = new TextDecoder().decode(stderr).trim();
  assert.equal(output.split("\n").length, 1, output);
  assert.ok(output.includes(`KV_PATH ${elsewhere}`), output);
  assert.ok(output.includes(STATE_DIR), output);
  assert.throws(() => Deno.statSync(elsewhere), Deno.errors.NotFound);
});
