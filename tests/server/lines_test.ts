/**
 * Where each kind of line goes (README.md, "Where each line goes"), on real processes: the access
 * log on stdout, operational events on stderr, every line JSON, with and without OpenTelemetry.
 * With the Redis store a SIGTERM used to print Deno's `warning: Detected export default { fetch }`
 * between "shutting down" and "stopped" (main.ts finished evaluating while the store closed);
 * with `OTEL_DENO_CONSOLE=replace` the events stay on stderr; under `capture`, Deno's default, Deno
 * prints the info events on stdout, which start-up says, as it says an unset service name.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { freePort, redisUnavailableReason, startRedis } from "../_redis.ts";

const ROOT = join(import.meta.dirname!, "..", "..");

/** A service run to its SIGTERM: its stdout and stderr lines. */
async function linesOf(env: Record<string, string>): Promise<{ out: string[]; err: string[] }> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--config", join(ROOT, "deno.json"), "-A", join(ROOT, "main.ts"), "--listen"],
    env: { PORT: "0", HOSTNAME: "127.0.0.1", PUBLIC_BASE_URL: "http://127.0.0.1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const out: string[] = [];
  const err: string[] = [];
  const read = async (stream: ReadableStream<Uint8Array<ArrayBuffer>>, into: string[]) => {
    for await (const line of stream.pipeThrough(new TextDecoderStream()).values()) {
      into.push(...line.split("\n").filter((l) => l !== ""));
    }
  };
  const reading = Promise.all([read(child.stdout, out), read(child.stderr, err)]);
  const deadline = Date.now() + 20_000;
  let address: string | undefined;
  while (address === undefined && Date.now() < deadline) {
    const listening = [...out, ...err].find((line) => line.includes('"message":"listening"'));
    address = listening ? JSON.parse(listening).address : undefined;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.ok(address, `never listened: ${[...out, ...err].join("\n")}`);
  const response = await fetch(`${address}api/v1/platform`);
  await response.body?.cancel();
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  await child.status;
  clearTimeout(timer);
  await reading;
  return { out, err };
}

/** Every line parsed, failing on one that is not a JSON object. */
function parsed(lines: readonly string[]): Record<string, unknown>[] {
  return lines.map((line) => {
    try {
      return JSON.parse(line);
    } catch {
      assert.fail(`not a JSON line: ${line}`);
    }
  });
}

const noRedis = redisUnavailableReason();

Deno.test({
  name: `with the Redis store a SIGTERM prints JSON lines only, "stopped" last${
    noRedis ? ` (ignored: ${noRedis})` : ""
  }`,
  ignore: noRedis !== undefined,
  async fn() {
    const redis = await startRedis();
    try {
      const { out, err } = await linesOf({ RATE_LIMIT_STORE: "redis", REDIS_URL: redis.url });
      assert.deepEqual(parsed(out).map((line) => line.path), ["/api/v1/platform"]);
      const messages = parsed(err).map((line) => line.message);
      assert.deepEqual(messages.slice(-2), [
        "shutting down: finishing requests in flight",
        "stopped",
      ]);
    } finally {
      await redis.stop();
    }
  },
});

Deno.test("with OpenTelemetry: replace keeps events on stderr, capture is warned, and so are an unset service name and tracing left on by OTEL_DENO=true alone", async () => {
  // Nothing listens there: every export is refused at once, which costs nothing.
  const otel = {
    OTEL_DENO: "true",
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${freePort()}`,
    OTEL_EXPORTER_OTLP_TIMEOUT: "500",
  };
  const replace = await linesOf({
    ...otel,
    OTEL_DENO_TRACING: "false",
    OTEL_DENO_CONSOLE: "replace",
    OTEL_SERVICE_NAME: "d",
  });
  assert.deepEqual(parsed(replace.out).map((line) => line.path), ["/api/v1/platform"]);
  const events = parsed(replace.err).map((line) => line.message);
  assert.equal(events[0], "listening");
  assert.equal(events.at(-1), "stopped");
  assert.ok(!events.some((m) => String(m).startsWith("OTEL_")), events.join("\n"));

  const capture = await linesOf(otel);
  const warnings = parsed(capture.err).filter((line) => line.level === "warn");
  assert.deepEqual(warnings.map((line) => String(line.message).split(" ")[0]), [
    "OTEL_DENO_TRACING",
    "OTEL_DENO_CONSOLE",
    "OTEL_SERVICE_NAME",
  ]);
  // The runtime prints captured info events on stdout, beside the access log, as README says.
  const stdout = parsed(capture.out);
  assert.ok(stdout.some((line) => line.message === "listening"));
  assert.ok(stdout.some((line) => line.path === "/api/v1/platform"));
});
