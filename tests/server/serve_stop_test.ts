/**
 * `deno serve --parallel` stops on a SIGTERM that comes while one of its workers is still starting
 * (lib/server/serve_stop.ts): without the relay, Deno 2.9.6's late worker never sees the signal and
 * the process serves on; and one whose main.ts begins after the relay's channel has closed (a
 * second after the stop) hears of it from the process's environment.
 *
 * @module
 */

import assert from "node:assert/strict";
import { freePort, waitForPort } from "../_redis.ts";

const ROOT = new URL("../../", import.meta.url);

/** Starts the slow-worker module, sends SIGTERM once the port answers, and waits at most `ms`. */
async function stopEarly(env: Record<string, string>, ms: number) {
  const dir = await Deno.makeTempDir();
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "serve",
      "--parallel",
      "--config",
      new URL("deno.json", ROOT).pathname,
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "--allow-read",
      "--allow-write",
      "--allow-env",
      new URL("tests/server/_slow_worker_serve.ts", ROOT).pathname,
    ],
    env: { ...env, DENO_JOBS: "2", STARTED: `${dir}/started` },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  try {
    await waitForPort(port, 20_000);
    child.kill("SIGTERM");
    let timer: ReturnType<typeof setTimeout> | undefined;
    const status = await Promise.race([
      child.status,
      new Promise<undefined>((resolve) => timer = setTimeout(() => resolve(undefined), ms)),
    ]);
    clearTimeout(timer);
    return { status, stderr };
  } finally {
    try {
      child.kill("SIGKILL");
    } catch { /* exited */ }
    await child.status;
    await stderr;
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("deno serve --parallel: a SIGTERM while a worker starts stops every worker, gracefully", async () => {
  const { status, stderr } = await stopEarly({}, 10_000);
  assert.ok(
    status?.code === 0,
    `${status ? `exited ${status.code}` : "did not exit within 10 s"}; it said:\n${await stderr}`,
  );
});

Deno.test("deno serve --parallel: without the relay, the starting worker misses the SIGTERM (the runtime's behaviour this guards)", async () => {
  const { status } = await stopEarly({ RELAY: "off" }, 4_000);
  assert.equal(status, undefined, "Deno now wires the signal for a worker that starts late");
});

/** How long after starting the late worker joins the relay: past the channel's linger (1 s). */
const LATE_MS = 2_500;

Deno.test("deno serve --parallel: a worker that joins the relay after its channel closed still stops, gracefully", async () => {
  const { status, stderr } = await stopEarly({ LATE_MS: String(LATE_MS) }, 10_000);
  assert.ok(
    status?.code === 0,
    `${status ? `exited ${status.code}` : "did not exit within 10 s"}; it said:\n${await stderr}`,
  );
});

Deno.test("deno serve --parallel: without the environment's marker, a worker that joins after the channel closed never hears (what the marker guards)", async () => {
  const { status } = await stopEarly({ LATE_MS: String(LATE_MS), MARKER: "off" }, LATE_MS + 3_000);
  assert.equal(status, undefined, "the late worker heard of the stop without the marker");
});
