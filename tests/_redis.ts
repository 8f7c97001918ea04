/**
 * A throwaway `redis-server` for tests: on a free loopback port, no persistence, stopped and started
 * again on the same port to simulate an outage.
 *
 * Outside CI a machine without `redis-server` skips the Redis tests (with the reason in the test's
 * name); in CI (`CI=true`) its absence is a failure, because `.ci/run` installs it.
 *
 * @module
 */

/** Why the Redis tests cannot run here, or undefined when they can. Throws in CI. */
export function redisUnavailableReason(): string | undefined {
  const found = Deno.env.get("PATH")?.split(":").some((dir) => {
    try {
      return Deno.statSync(`${dir}/redis-server`).isFile;
    } catch {
      return false;
    }
  });
  if (found) return undefined;
  if (Deno.env.get("CI") === "true") {
    throw new Error(
      "redis-server is not on PATH, and CI must run the Redis tests (apt-get install redis-server)",
    );
  }
  return "redis-server is not on PATH (apt-get install redis-server)";
}

/** A running (or stopped) test Redis. */
export interface TestRedis {
  /** `redis://127.0.0.1:<port>`. */
  url: string;
  /** The port, kept across restarts. */
  port: number;
  /** Kills the server (SIGKILL: an outage, not a shutdown) and waits for it to exit. */
  stop(): Promise<void>;
  /** Starts it again on the same port, empty, and waits until it answers. */
  start(): Promise<void>;
}

/** A port that was free a moment ago on 127.0.0.1. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** Starts `redis-server` on a free loopback port and waits until it accepts connections. */
export async function startRedis(): Promise<TestRedis> {
  const port = freePort();
  let child: Deno.ChildProcess | undefined;
  const start = async () => {
    child = new Deno.Command("redis-server", {
      args: [
        "--port",
        String(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "yes",
      ],
      stdout: "null",
      stderr: "null",
    }).spawn();
    await waitForPort(port, 5000);
  };
  const stop = async () => {
    if (child === undefined) return;
    child.kill("SIGKILL");
    await child.status;
    child = undefined;
  };
  await start();
  return { url: `redis://127.0.0.1:${port}`, port, stop, start };
}

/** Waits until something accepts TCP connections on `port`, at most `timeoutMs`. */
export async function waitForPort(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (true) {
    try {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      conn.close();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}
