/**
 * A restart on one port without a proxy (deploy/README.md, "One port"): a new instance
 * started with `REUSE_PORT=true` on the port of the running one, which is then sent SIGTERM, under
 * the issue's 64 keep-alive clients that honour `Connection: close` and reconnect at once. Run in a
 * network namespace of its own (tests/_handover.ts), with `net.ipv4.tcp_migrate_req=1` there as the
 * guide sets it, so the machine's settings are neither needed nor touched.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import type { Trial } from "./_handover.ts";
import { findTool } from "./_tools.ts";

const ROOT = join(import.meta.dirname!, "..");
/** Trials of the handover: each starts two instances and stops one, about 3 s. */
const TRIALS = 2;
/** The longest the helper may run before it is killed and the test fails. */
const RUN_LIMIT_MS = 60_000;

/** Why the test cannot run here, or undefined. */
function unavailable(): string | undefined {
  if (Deno.build.os !== "linux") return "SO_REUSEPORT handover and tcp_migrate_req are Linux's";
  if (Deno.uid() !== 0) return "not run as root: cannot create a network namespace";
  if (findTool("unshare") === undefined) return "unshare (util-linux) is not installed";
  if (findTool("ip") === undefined) return "ip (iproute2) is not installed";
  try {
    Deno.statSync("/proc/sys/net/ipv4/tcp_migrate_req");
  } catch {
    return "this kernel has no net.ipv4.tcp_migrate_req (Linux 5.14 or later)";
  }
  return undefined;
}
const skip = unavailable();

/** Runs tests/_handover.ts in a new network namespace and returns its trials. */
async function handover(migrate: 0 | 1, trials: number): Promise<Trial[]> {
  const child = new Deno.Command(findTool("unshare")!, {
    args: [
      "-n",
      Deno.execPath(),
      "run",
      "-A",
      "tests/_handover.ts",
      "handover",
      `${migrate}`,
      `${trials}`,
    ],
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), RUN_LIMIT_MS);
  const { success, stdout, stderr } = await child.output();
  clearTimeout(timer);
  const said = new TextDecoder().decode(stderr);
  assert.ok(success, `the handover helper failed or overran ${RUN_LIMIT_MS} ms:\n${said}`);
  return new TextDecoder().decode(stdout).trim().split("\n").map((line) => JSON.parse(line));
}

Deno.test({
  name:
    `a new instance on the same port (REUSE_PORT) takes over from one sent SIGTERM: no request lost${
      skip ? ` (ignored: ${skip})` : ""
    }`,
  ignore: skip !== undefined,
  async fn() {
    const trials = await handover(1, TRIALS);
    assert.equal(trials.length, TRIALS);
    for (const trial of trials) {
      assert.deepEqual(
        { lost: trial.lost, refused: trial.refused, failed: trial.failed, exit: trial.exit },
        { lost: 0, refused: 0, failed: 0, exit: 0 },
        JSON.stringify(trials),
      );
      assert.ok(trial.answered > 1000, `answered: ${trial.answered}`);
    }
  },
});
