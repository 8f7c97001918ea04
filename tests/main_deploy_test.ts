/**
 * main.ts run as Deno Deploy runs it: the build command of deno.json's `deploy` configuration (the
 * bundle of main.ts), then `deno run` with every permission on its entrypoint and arguments, the
 * platform's predefined variables, the address in `DENO_SERVE_ADDRESS`, the client address passed
 * by the runtime (`x-deno-client-address` with `DENO_TRUST_PROXY_HEADERS=1`), and SIGINT to stop,
 * with a kill 5 s later.
 *
 * @module
 */

import assert from "node:assert/strict";
import { DEPLOY_PLATFORM } from "./_deno_deploy_env.ts";
import { join } from "node:path";
import { getHead, keepAliveLoad } from "./_keep_alive_load.ts";
import { freePort } from "./_redis.ts";

const ROOT = join(import.meta.dirname!, "..");

/** deno.json's `deploy` configuration: what Deploy's build stage runs, and what it executes. */
const DEPLOY = JSON.parse(Deno.readTextFileSync(join(ROOT, "deno.json"))).deploy as {
  build?: string;
  runtime: { entrypoint: string; args?: string[] };
};
const RUNTIME = DEPLOY.runtime;

/**
 * Runs deno.json's `deploy.build` in the project's folder, as Deploy's build stage runs the shell
 * command (`deno task build`: the bundle the entrypoint names), with this test's `deno`.
 */
function buildAsDeploy(): void {
  if (DEPLOY.build === undefined) return;
  const [command, ...args] = DEPLOY.build.trim().split(/\s+/);
  assert.equal(command, "deno", `deploy.build runs something other than deno: ${DEPLOY.build}`);
  const { success, stderr } = new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    stdout: "null",
    stderr: "piped",
  }).outputSync();
  assert.ok(success, `deploy.build failed: ${new TextDecoder().decode(stderr)}`);
}

/** Lines of a stream, as they come. */
async function* lines(stream: ReadableStream<Uint8Array<ArrayBuffer>>): AsyncGenerator<string> {
  let pending = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    pending += chunk;
    const parts = pending.split("\n");
    pending = parts.pop()!;
    yield* parts;
  }
  if (pending !== "") yield pending;
}

Deno.test("main.ts serves on Deno Deploy: the platform's address, per-client budgets, and a SIGINT that loses nothing", async () => {
  buildAsDeploy();
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", RUNTIME.entrypoint, ...(RUNTIME.args ?? [])],
    cwd: ROOT,
    env: {
      ...DEPLOY_PLATFORM,
      DENO_SERVE_ADDRESS: `tcp:127.0.0.1:${port}`,
      RATE_LIMIT: "5",
      NO_COLOR: "1",
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stdout = (async () => {
    const seen: string[] = [];
    for await (const line of lines(child.stdout)) seen.push(line);
    return seen;
  })();
  const events: Record<string, unknown>[] = [];
  const { promise: listening, resolve: listened } = Promise.withResolvers<void>();
  const stderr = (async () => {
    for await (const line of lines(child.stderr)) {
      try {
        events.push(JSON.parse(line));
      } catch {
        events.push({ text: line });
      }
      if (/"listening"/.test(line)) listened();
    }
  })();
  try {
    await Promise.race([
      listening,
      child.status.then(() => {
        throw new Error(`exited before listening: ${JSON.stringify(events)}`);
      }),
    ]);
    const url = `http://127.0.0.1:${port}`;
    const as = (client: string) => ({ headers: { "x-deno-client-address": client } });

    // It serves, with links on the timeline's documented URL.
    const first = await fetch(`${url}/api/v1/platform`, as("198.51.100.7:40000"));
    assert.equal(first.status, 200);
    assert.equal((await first.json()).openapi, "https://discovery.acme.deno.net/openapi.json");
    assert.ok(
      events.some((e) => e.baseUrl === "https://discovery.acme.deno.net"),
      JSON.stringify(events),
    );

    // Two client addresses, two budgets: A spends its 5, B still has all of its own.
    for (let i = 2; i <= 5; i++) {
      const response = await fetch(`${url}/api/v1/platform`, as(`198.51.100.7:${40000 + i}`));
      await response.body?.cancel();
      assert.equal(response.status, 200);
    }
    const refused = await fetch(`${url}/api/v1/platform`, as("198.51.100.7:41000"));
    await refused.body?.cancel();
    assert.equal(refused.status, 429);
    const other = await fetch(`${url}/api/v1/platform`, as("203.0.113.9:40000"));
    await other.body?.cancel();
    assert.equal(other.status, 200);
    assert.equal(other.headers.get("ratelimit-remaining"), "4");

    // SIGINT mid-load: every request written is answered; refused connections carried nothing.
    const { promise: stopped, resolve: stop } = Promise.withResolvers<void>();
    // SIGINT once the load is under way on every connection (counted, not timed: a fresh process
    // on a machine busy with the parallel suite answered 16 requests in its first 400 ms).
    const { promise: underWay, resolve: loaded } = Promise.withResolvers<void>();
    let answeredBefore = 0;
    const load = keepAliveLoad({
      port,
      connections: 16,
      until: stopped,
      onAnswered: () => ++answeredBefore >= 4 * 16 && loaded(),
      // Each request from its own client address, so none is refused by the limit.
      request: (n) =>
        getHead(
          "/api/v1/platform",
          `x-deno-client-address: 10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}:1`,
        ),
    });
    let waited: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      underWay,
      new Promise((_, reject) =>
        waited = setTimeout(() => reject(new Error("no load within 10 s")), 10_000)
      ),
    ]);
    clearTimeout(waited);
    const signalled = performance.now();
    child.kill("SIGINT");
    const status = await child.status;
    const exitMs = performance.now() - signalled;
    stop();
    const outcome = await load;
    assert.equal(status.code, 0, JSON.stringify(events));
    assert.ok(exitMs < 5000, `exited ${Math.round(exitMs)} ms after SIGINT; Deploy kills at 5 s`);
    assert.equal(
      outcome.lost,
      0,
      `requests lost: ${JSON.stringify({ ...outcome, answered: [...outcome.answered] })}`,
    );
    const answered = [...outcome.answered.values()].reduce((a, b) => a + b, 0);
    assert.ok(answered > 50, `only ${answered} requests were answered under load`);
    assert.equal(outcome.answered.get(200), answered, JSON.stringify([...outcome.answered]));
    assert.equal(outcome.toldToClose, 16, "every connection is told to close before the end");

    // The access log is flushed: one line per answered request (the 7 above and the load).
    const logged = (await stdout).filter((line) => line.startsWith("{"));
    assert.equal(logged.length, 7 + answered);
  } finally {
    try {
      child.kill("SIGKILL");
    } catch { /* exited */ }
    await child.status;
    await stderr;
    await stdout;
  }
});
