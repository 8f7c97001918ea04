/**
 * The VM recipe's instances as systemd starts them, for the tests and benchmarks that run the recipe
 * behind real nginx: deploy/discovery@.service (the compiled binary, run here as `deno run` with the
 * permission and unstable flags `deno task compile` bakes into it) or deploy/discovery-node@.service
 * (`node lib/node/main.ts`, its `ExecStart`), each with its unit's `Environment=` lines (`%i` the
 * instance's port, its `StateDirectory=` a temporary folder) and the operator's
 * `/etc/discovery/env` holding `PUBLIC_BASE_URL` and whatever a test adds.
 *
 * @module
 */

import { join } from "node:path";
import { DEPLOY, serviceSettings, UNIT } from "./_nginx.ts";
import { type ServiceProcess, startService } from "./_service_process.ts";

const ROOT = join(import.meta.dirname!, "..");
/** deploy/discovery-node@.service as shipped. */
export const NODE_UNIT = Deno.readTextFileSync(join(DEPLOY, "discovery-node@.service"));
/** Where a unit's `StateDirectory=` is on a real machine. */
const STATE_ROOT = "/var/lib";
/** The operator's `/etc/discovery/env`: nothing but the public URL. */
const OPERATOR_ENV = { PUBLIC_BASE_URL: "https://discovery.example.com" };
/** How long an instance may take to listen: two suites on the 2 cores of CI, with a KV file. */
const LISTEN_WAIT_MS = 30_000;
/**
 * How long an instance may take to say its warm-up is over: seconds where the token ranks' file was
 * not built (`deno task build:tokens`) and the ranks are packed at start, on shared cores.
 */
const WARM_UP_WAIT_MS = 30_000;
/** How often {@linkcode warmedUp} looks at the instance's events. */
const EVENT_POLL_MS = 50;

/**
 * The environment systemd gives instance `port` of `unit`: its `Environment=` lines with `%i` the
 * port, the state folder mapped to `stateDir`, then the operator's file.
 */
export function unitEnvironment(
  unit: string,
  port: number,
  stateDir: string,
): Record<string, string> {
  const settings = serviceSettings(unit);
  const stateName = settings.get("StateDirectory")?.[0];
  const env: Record<string, string> = {};
  for (const line of settings.get("Environment") ?? []) {
    for (const pair of line.split(/\s+/)) {
      const at = pair.indexOf("=");
      const value = pair.slice(at + 1).replaceAll("%i", String(port));
      env[pair.slice(0, at)] = stateName === undefined
        ? value
        : value.replaceAll(`${STATE_ROOT}/${stateName}`, stateDir);
    }
  }
  return { ...env, ...OPERATOR_ENV };
}

/**
 * The permission and unstable flags of deno.json's `compile` task (what the binary carries), the
 * state folder mapped to `stateDir`; reading also this checkout, whose `static/` the binary embeds.
 */
export function compileFlags(stateDir: string): string[] {
  const task = JSON.parse(Deno.readTextFileSync(join(ROOT, "deno.json"))).tasks.compile as string;
  const flags = task.split(/\s+/).filter((flag) => /^--(allow-|unstable-|v8-flags=)/.test(flag))
    .map((flag) => flag.replaceAll(`${STATE_ROOT}/discovery`, stateDir));
  return flags.map((flag) => flag.startsWith("--allow-read=") ? `${flag},${ROOT}` : flag);
}

/** Options of {@linkcode startInstance}. */
export interface InstanceOptions {
  /** Node's binary (`tests/_node.ts`): the Node unit's instance; Deno's binary's otherwise. */
  node?: string;
  /** Lines the operator's `/etc/discovery/env` adds. */
  env?: Record<string, string>;
}

/** Instance `port` of the recipe, started as systemd would start it (its access log off). */
export function startInstance(
  port: number,
  stateDir: string,
  options: InstanceOptions = {},
): Promise<ServiceProcess> {
  const unit = options.node === undefined ? UNIT : NODE_UNIT;
  const env = { ...unitEnvironment(unit, port, stateDir), ACCESS_LOG: "false", ...options.env };
  return startService(
    env,
    LISTEN_WAIT_MS,
    options.node === undefined ? { flags: compileFlags(stateDir) } : { node: options.node },
  );
}

/**
 * Resolves once `instance` has said that its warm-up is over (every representation built: no
 * request waits for one any more); rejects after {@linkcode WARM_UP_WAIT_MS}.
 */
export async function warmedUp(instance: ServiceProcess): Promise<void> {
  const deadline = Date.now() + WARM_UP_WAIT_MS;
  while (!instance.events.some((event) => String(event.message).startsWith("warmed up"))) {
    if (Date.now() > deadline) {
      throw new Error(`${instance.url} did not say "warmed up" within ${WARM_UP_WAIT_MS} ms`);
    }
    await new Promise((resolve) => setTimeout(resolve, EVENT_POLL_MS));
  }
}

/**
 * Stops `instances[index]` with `signal`, puts what `start` starts in its place, and answers the old
 * one's exit code and the status of one direct request to the new one (as a rolling restart's
 * next step would check it).
 */
export async function restartInstance(
  instances: ServiceProcess[],
  index: number,
  signal: "SIGTERM" | "SIGKILL",
  start: () => Promise<ServiceProcess>,
): Promise<{ code: number; status: number }> {
  instances[index]!.kill(signal);
  const code = await instances[index]!.exited;
  instances[index] = await start();
  const direct = await fetch(`${instances[index]!.url}/api/v1/platform`);
  await direct.body?.cancel();
  return { code, status: direct.status };
}
