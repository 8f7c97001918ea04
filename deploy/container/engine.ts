/**
 * The container engine `deno task container` and its test drive: podman where it is installed,
 * else docker where its daemon answers, with the arguments every build and run on such a machine
 * needs. One place runs the engine's commands and turns a failure into a sentence.
 *
 * @module
 */

/** A container engine, as its commands are spelled. */
export interface Engine {
  /** `podman` or `docker`. */
  name: "podman" | "docker";
  /** The command and the global options before its subcommand (`podman --runtime runc`). */
  command: string[];
}

/** What one engine command printed, and how it ended. */
export interface EngineOutput {
  /** Its exit code (124 when {@linkcode EngineOptions.timeoutMs} ran out). */
  code: number;
  /** Its standard output, as text. */
  stdout: string;
  /** Its standard error, as text. */
  stderr: string;
}

/** How to run an engine command. */
export interface EngineOptions {
  /** Kill it (SIGKILL) after this long and report code 124, as `timeout(1)` does. */
  timeoutMs?: number;
  /** The working directory. */
  cwd?: string;
  /** Show its output as it comes (a build's steps) instead of collecting it. */
  inherit?: boolean;
}

/**
 * The resource limits of every build and run: podman's defaults (nofile 1048576) are above the
 * hard limits such a machine lets a container raise (20000 here), and runc then refuses to create
 * the container. 4096 descriptors and processes are far above what a build step or the service
 * under the tests' load uses.
 */
export const ULIMITS: readonly string[] = [
  "--ulimit",
  "nofile=4096:4096",
  "--ulimit",
  "nproc=4096:4096",
];

/** Whether `name` is an executable on `PATH` or in the system folders (runc is in /usr/sbin). */
function onPath(name: string): boolean {
  return `${Deno.env.get("PATH") ?? ""}:/usr/sbin:/sbin`.split(":").some((dir) => {
    try {
      return dir !== "" && Deno.statSync(`${dir}/${name}`).isFile;
    } catch {
      return false;
    }
  });
}

/**
 * The engine to use: podman (with `--runtime runc` when runc is installed: crun, podman's default
 * elsewhere, refuses hybrid cgroup hierarchies such as this machine's), else docker when
 * `docker info` answers (a docker client without its daemon is not an engine). Throws a sentence
 * naming the fix when there is neither.
 */
export async function findEngine(): Promise<Engine> {
  if (onPath("podman")) {
    return {
      name: "podman",
      command: ["podman", ...(onPath("runc") ? ["--runtime", "runc"] : [])],
    };
  }
  if (onPath("docker")) {
    const docker: Engine = { name: "docker", command: ["docker"] };
    const info = await engine(docker, ["info", "--format", "{{.ServerVersion}}"], {
      timeoutMs: 10_000,
    });
    if (info.code === 0) return docker;
    throw new Error(
      `docker is installed but its daemon does not answer (${
        firstLine(info.stderr)
      }): start it, or install podman (apt-get install podman runc)`,
    );
  }
  throw new Error("no container engine: install podman (apt-get install podman runc) or docker");
}

/** The first non-empty line of `text`, for a sentence. */
export function firstLine(text: string): string {
  return text.split("\n").map((line) => line.trim()).find((line) => line !== "") ?? "no output";
}

/** Runs `engine`'s subcommand `args` and returns what it printed and its exit code. */
export async function engine(
  which: Engine,
  args: readonly string[],
  options: EngineOptions = {},
): Promise<EngineOutput> {
  const child = new Deno.Command(which.command[0]!, {
    args: [...which.command.slice(1), ...args],
    stdin: "null",
    stdout: options.inherit ? "inherit" : "piped",
    stderr: options.inherit ? "inherit" : "piped",
    ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
  }).spawn();
  let timedOut = false;
  const timer = options.timeoutMs === undefined ? undefined : setTimeout(() => {
    timedOut = true;
    child.kill("SIGKILL");
  }, options.timeoutMs);
  try {
    if (options.inherit) {
      const status = await child.status;
      return { code: timedOut ? 124 : status.code, stdout: "", stderr: "" };
    }
    const output = await child.output();
    return {
      code: timedOut ? 124 : output.code,
      stdout: new TextDecoder().decode(output.stdout),
      stderr: new TextDecoder().decode(output.stderr),
    };
  } finally {
    clearTimeout(timer);
  }
}

/** Runs `engine`'s subcommand `args`; throws a sentence with its first error line when it fails. */
export async function engineOk(
  which: Engine,
  args: readonly string[],
  options: EngineOptions = {},
): Promise<string> {
  const output = await engine(which, args, options);
  if (output.code !== 0) {
    throw new Error(
      `${which.name} ${args[0]} failed (exit ${output.code}): ${firstLine(output.stderr)}`,
    );
  }
  return output.stdout;
}

/** The labels of a local image, or undefined when there is no such image. */
export async function imageLabels(
  which: Engine,
  image: string,
): Promise<Record<string, string> | undefined> {
  const output = await engine(which, [
    "image",
    "inspect",
    "--format",
    "{{json .Config.Labels}}",
    image,
  ]);
  if (output.code !== 0) return undefined;
  return JSON.parse(output.stdout.trim() || "null") ?? {};
}
