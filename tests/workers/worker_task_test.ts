/**
 * `deno task worker` as a user runs it: the task from deno.json builds the Worker and serves it on
 * workerd at `http://127.0.0.1:$PORT`, the README's quick-start curl lines answer 200 there, and
 * Ctrl-C (SIGINT) stops it, workerd included.
 *
 * @module
 */

import assert from "node:assert/strict";
import { ROOT } from "../_deno_info.ts";
import { rawRequest } from "../_server.ts";
import { freePort } from "../bench/_proc.ts";

/** The curl lines of README's quick start, as words. */
async function quickStartCurls(): Promise<string[][]> {
  const readme = await Deno.readTextFile(`${ROOT}/README.md`);
  const start = readme.indexOf("## Quick start");
  const section = readme.slice(start, readme.indexOf("\n## ", start + 1));
  return section.split("\n").filter((line) => line.startsWith("curl ")).map((line) =>
    (line.match(/'[^']*'|\S+/g) ?? []).map((word) => word.replace(/^'(.*)'$/, "$1"))
  );
}

/**
 * The local addresses of the sockets listening on TCP `port`, from /proc/net/tcp and tcp6 (Linux):
 * IPv4 ones dotted, IPv6 ones as 32 hex digits.
 */
async function listeners(port: number): Promise<string[]> {
  const found: string[] = [];
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    const table = await Deno.readTextFile(file).catch(() => "");
    for (const line of table.split("\n").slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/);
      if (state !== "0A" || local === undefined) continue; // 0A: LISTEN
      const [address, hexPort] = local.split(":");
      if (parseInt(hexPort!, 16) !== port) continue;
      found.push(
        address!.length === 8
          ? address!.match(/../g)!.reverse().map((byte) => parseInt(byte, 16)).join(".")
          : address!,
      );
    }
  }
  return found;
}

/** Reads `stream` until a line contains `text`; the lines read so far on failure. */
async function waitForLine(stream: ReadableStream<Uint8Array>, text: string): Promise<void> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let seen = "";
  try {
    while (!seen.includes(text)) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the task ended before "${text}":\n${seen}`);
      seen += decoder.decode(value, { stream: true });
    }
  } finally {
    reader.releaseLock();
  }
}

Deno.test("deno task worker serves the Worker on workerd at 127.0.0.1:$PORT only, its links naming that address whatever a request's Host, answers README's curl lines, and stops on SIGINT, workerd included", async () => {
  const curls = await quickStartCurls();
  assert.ok(curls.length >= 2, `README's quick start has curl lines: ${curls.length}`);
  const port = freePort();
  const task = new Deno.Command(Deno.execPath(), {
    args: ["task", "worker"],
    cwd: ROOT,
    env: { PORT: String(port), ACCESS_LOG: "false" },
    stdout: "piped",
    stderr: "null",
  }).spawn();
  try {
    await waitForLine(task.stdout, `http://127.0.0.1:${port}`);
    // Listening on 127.0.0.1 only: not a server for the open internet (deploy/README.md).
    assert.deepEqual(await listeners(port), ["127.0.0.1"]);
    // PUBLIC_BASE_URL is the task's own address, whatever the first request's Host says.
    const first = await rawRequest(`http://127.0.0.1:${port}`, "/api/v1/platform", {
      headers: { host: "attacker.example" },
    });
    assert.equal(
      JSON.parse(new TextDecoder().decode(first.body)).openapi,
      `http://127.0.0.1:${port}/openapi.json`,
    );
    for (const words of curls) {
      const args = words.slice(1).map((word) =>
        word.replace(/^http:\/\/localhost:8000(?=\/|$)/, `http://127.0.0.1:${port}`)
      );
      const output = await new Deno.Command("curl", {
        args: ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", ...args],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.equal(new TextDecoder().decode(output.stdout), "200", words.join(" "));
    }
  } finally {
    task.kill("SIGINT");
  }
  await task.status;
  await task.stdout.cancel().catch(() => {});
  // Stopped, workerd with it: nothing answers on the port any more.
  await assert.rejects(fetch(`http://127.0.0.1:${port}/api/v1/platform`));
});
