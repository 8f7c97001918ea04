/**
 * Stops or replaces one instance of the service on one port under load, and prints what happened to
 * every request: run inside its own network namespace (`unshare -n`) by tests/handover_test.ts, so
 * that the namespace's `net.ipv4.tcp_migrate_req` can be set without touching the machine's.
 *
 * `unshare -n deno run -A tests/_handover.ts <stop|handover> <migrate 0|1> <trials> [close|keep-alive]
 * [node binary]` brings
 * the namespace's loopback up, sets `tcp_migrate_req`, then per trial: starts the service with
 * `REUSE_PORT=true` under {@linkcode LOAD_CLIENTS} keep-alive clients that reconnect when told to
 * close (with `close`, clients that open a new connection for every request instead), and after
 * {@linkcode LOAD_BEFORE_MS} either sends it SIGTERM (`stop`) or starts a second instance on the same
 * port and, once it listens, sends the first SIGTERM (`handover`). One JSON line per trial on stdout.
 * With a Node binary's path (`"$(npx -y node@24 -p process.execPath)"`, resolved before `unshare`),
 * the service is Node's entry (`lib/node/main.ts`) on it instead of Deno's.
 *
 * @module
 */

import { getHead, keepAliveLoad } from "./_keep_alive_load.ts";
import { type ServiceProcess, startService } from "./_service_process.ts";
import { findTool } from "./_tools.ts";

/** Clients of the load: the measurement. */
export const LOAD_CLIENTS = 64;
/** Load before the stop or the handover begins, in ms. */
export const LOAD_BEFORE_MS = 300;
/** Load after the old instance exited, in ms: clients meet the new one (or a closed port). */
export const LOAD_AFTER_MS = 300;
/** The port, free in a namespace of its own. */
const PORT = 8000;

/** One trial's figures. */
export interface Trial {
  /** Requests written on a connection that closed without their answer. */
  lost: number;
  /** Connections refused (nothing written). */
  refused: number;
  /** Requests answered, all statuses. */
  answered: number;
  /** Answers other than 200. */
  failed: number;
  /** The old instance's exit code. */
  exit: number;
}

async function run(command: string, ...args: string[]): Promise<void> {
  const { success, stderr } = await new Deno.Command(command, {
    args,
    stdout: "null",
    stderr: "piped",
  })
    .output();
  if (!success) {
    throw new Error(`${command} ${args.join(" ")}: ${new TextDecoder().decode(stderr)}`);
  }
}

const ENV = { PORT: String(PORT), REUSE_PORT: "true", RATE_LIMIT: "1000000" };

async function trial(mode: string, perRequest: boolean, node?: string): Promise<Trial> {
  const options = node === undefined ? {} : { node };
  let old: ServiceProcess | undefined = await startService(ENV, undefined, options);
  let next: ServiceProcess | undefined;
  const { promise: done, resolve: finish } = Promise.withResolvers<void>();
  const load = keepAliveLoad({
    port: PORT,
    connections: LOAD_CLIENTS,
    until: done,
    request: () => getHead("/api/v1/platform", ...(perRequest ? ["Connection: close"] : [])),
    reconnect: true,
  });
  let exit = -1;
  try {
    await new Promise((resolve) => setTimeout(resolve, LOAD_BEFORE_MS));
    if (mode === "handover") next = await startService(ENV, undefined, options);
    old.kill("SIGTERM");
    exit = await old.exited;
    old = undefined;
    await new Promise((resolve) => setTimeout(resolve, LOAD_AFTER_MS));
  } finally {
    finish();
    await load.catch(() => undefined);
    await old?.stop();
    await next?.stop();
  }
  const outcome = await load;
  const answered = [...outcome.answered.values()].reduce((a, b) => a + b, 0);
  return {
    lost: outcome.lost,
    refused: outcome.refused,
    answered,
    failed: answered - (outcome.answered.get(200) ?? 0),
    exit,
  };
}

if (import.meta.main) {
  const [mode = "handover", migrate = "1", trials = "1", clients = "keep-alive", runtime] =
    Deno.args;
  // A Node binary's path, resolved outside the namespace (npx there has no registry to ask).
  const node = runtime;
  await run(findTool("ip") ?? "ip", "link", "set", "lo", "up");
  await Deno.writeTextFile("/proc/sys/net/ipv4/tcp_migrate_req", migrate);
  for (let i = 0; i < Number(trials); i++) {
    // deno-lint-ignore no-console
    console.log(JSON.stringify(await trial(mode, clients === "close", node)));
  }
}
