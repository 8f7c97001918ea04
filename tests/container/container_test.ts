/**
 * The image `deno task container` builds, run as an operator runs it, with `PUBLIC_BASE_URL` the
 * only variable given (`deno task container:test` builds, then runs this file; not in
 * `deno task test`, since it needs root, podman or docker and a built image: about 20 s here once
 * the image is built):
 *
 * - read-only, no writable place at all, its port published on 127.0.0.1: every path and
 *   representation answers as the sources answer in process, within the OpenAPI contract it
 *   serves; the engine's `stop` drains (answers carry `Connection: close`, then the port closes)
 *   and the container exits 0 well within the stop's 10 s;
 * - read-only, published: one caller's 100 requests admit 60 and refuse 40, each logged;
 * - read-only without a network (`--network none`): it starts from what the build put in the
 *   image (no npm package, lockfile or cache fetched or written), and its HEALTHCHECK passes on
 *   the operator port (`HEALTH_PORT`), in no access-log line;
 * - on a writable root: serving writes nothing (`diff` shows only what the engine adds to a
 *   container that runs nothing).
 *
 * Every container's logs (`<engine> logs`, stdout and stderr apart) are JSON lines, none a warning.
 *
 * @module
 */

import assert from "node:assert/strict";
import { engine, engineOk, findEngine, ULIMITS } from "../../deploy/container/engine.ts";
import { IMAGE } from "../../deploy/container/build.ts";
import { loadContract } from "../_contract.ts";
import { rawRequest, startServer } from "../_server.ts";
import { assertSameAnswer } from "../_same_answer.ts";
import { type Container, readOnly, startContainer } from "./_container.ts";

const which = await findEngine();
if ((await engine(which, ["image", "inspect", IMAGE])).code !== 0) {
  throw new Error(`no image ${IMAGE} here: build it first (deno task container)`);
}

/** The one variable the containers get. */
const BASE_URL = "https://api.example.com";

/**
 * "Well within" the stop's 10 s: the drain is one second of `Connection: close` and then the
 * requests in flight; 5 s leaves room for a machine busy with other work.
 */
const STOP_BOUND_MS = 5_000;

/** The paths the service serves (the spec's, and the portal's files), and one it does not. */
const PATHS = [
  "/api/v1/platform",
  "/",
  "/developers",
  "/api",
  "/developers/deprecation-policy",
  "/developers/deprecation-policy.md",
  "/openapi.json",
  "/openapi",
  "/llms.txt",
  "/robots.txt",
  "/.well-known/api-catalog",
  "/style.css",
  "/favicon.svg",
  "/no/such/path",
];

/** The paths that negotiate a representation (DESIGN.md, "Paths and representations"). */
const NEGOTIATED = new Set(["/api/v1/platform", "/", "/developers", "/api", "/no/such/path"]);

/** Each path's requests: every path's default; a negotiated one's every representation. */
function variants(path: string): Array<{ method: string; headers: Record<string, string> }> {
  const get = (headers: Record<string, string>) => ({ method: "GET", headers });
  if (!NEGOTIATED.has(path)) return [get({})];
  return [
    get({}),
    get({ accept: "application/json" }),
    get({ accept: "text/markdown" }),
    get({ accept: "text/html;q=0.9, text/markdown;q=0.8" }),
  ];
}

/** Requests of codings and methods beyond {@linkcode variants}, on the discovery path. */
const EXTRA = [
  { method: "GET", headers: { "accept-encoding": "br" } },
  { method: "GET", headers: { "accept-encoding": "gzip", accept: "text/markdown" } },
  { method: "HEAD", headers: {} },
  { method: "POST", headers: {} },
  {
    method: "OPTIONS",
    headers: { origin: "https://app.example.org", "access-control-request-method": "GET" },
  },
];

/** Stops `container` and checks the exit and the logs; returns its logs' lines, parsed. */
async function stopAndCheck(container: Container) {
  const { code, ms } = await container.stop();
  assert.equal(code, 0, `${container.name} exit code:\n${container.stderr.join("\n")}`);
  assert.ok(ms < STOP_BOUND_MS, `${which.name} stop took ${Math.round(ms)} ms`);
  const logs = await engine(which, ["logs", container.name]);
  const parse = (stream: string, text: string) =>
    text.split("\n").filter((line) => line !== "").map((line) => {
      try {
        return JSON.parse(line) as Record<string, unknown>;
      } catch {
        throw new Error(`${container.name}'s ${stream} holds a line that is not JSON: ${line}`);
      }
    });
  const stdout = parse("stdout", logs.stdout);
  const stderr = parse("stderr", logs.stderr);
  const messages = stderr.map((event) => event.message);
  for (const message of ["listening", "shutting down: finishing requests in flight", "stopped"]) {
    assert.ok(messages.includes(message), `${container.name}: no "${message}" in ${messages}`);
  }
  assert.deepEqual(stderr.filter((event) => event.level !== "info"), [], "only info events");
  return { stdout, stderr };
}

/** `<engine> diff` of a container: the paths its layer added, changed or deleted, sorted. */
async function diffOf(name: string): Promise<string[]> {
  return (await engineOk(which, ["diff", name])).split("\n").filter((line) => line !== "").sort();
}

Deno.test("read-only with only PUBLIC_BASE_URL: every path answers as the sources do, within its contract, and a stop drains and exits 0", async (t) => {
  const container = await startContainer(which, {
    flags: readOnly(which),
    publish: true,
    baseUrl: BASE_URL,
  });
  try {
    await using reference = await startServer({ env: { PUBLIC_BASE_URL: BASE_URL } });
    const url = container.url!;
    const contract = await loadContract(url);
    await t.step("every path and representation", async () => {
      const requests = [
        ...PATHS.flatMap((path) => variants(path).map((variant) => ({ path, ...variant }))),
        ...EXTRA.map((variant) => ({ path: "/api/v1/platform", ...variant })),
      ];
      for (const { path, method, headers } of requests) {
        const what = `${method} ${path} ${JSON.stringify(headers)}`;
        const answer = await rawRequest(url, path, { method, headers });
        if (answer.status === 429) assert.fail(`${what}: refused; the test sends too many`);
        await assertSameAnswer(
          answer,
          await rawRequest(reference.url, path, { method, headers }),
          what,
        );
        try {
          contract.check(path, method, answer);
        } catch (error) {
          throw new Error(`${what}: ${(error as Error).message}`, { cause: error });
        }
      }
    });
    await t.step("a stop drains: Connection: close, then the port closes, exit 0", async () => {
      const stopping = stopAndCheck(container);
      const answers: Array<string | null> = [];
      let failure: unknown;
      // Requests one after another on keep-alive connections until the service stops accepting.
      for (;;) {
        try {
          const response = await fetch(`${url}/robots.txt`);
          await response.arrayBuffer();
          answers.push(response.headers.get("connection"));
        } catch (error) {
          failure = error;
          break;
        }
      }
      await stopping;
      assert.ok(failure instanceof TypeError, String(failure));
      // Answers before the signal keep the connection; from it on, each says close.
      const first = answers.indexOf("close");
      assert.ok(first >= 0, `no answer carried Connection: close (${answers.length} answers)`);
      assert.deepEqual(answers.slice(first).filter((value) => value !== "close"), []);
    });
  } finally {
    await container.remove();
  }
});

Deno.test("read-only, through the published port: one caller's 100 requests admit 60 and refuse 40, each logged", async () => {
  const container = await startContainer(which, {
    flags: readOnly(which),
    publish: true,
    baseUrl: BASE_URL,
  });
  try {
    const statuses: number[] = [];
    for (let i = 0; i < 100; i++) {
      const response = await fetch(`${container.url}/api/v1/platform`);
      await response.arrayBuffer();
      statuses.push(response.status);
    }
    // Every request reaches the container from the one address the engine's port mapping gives
    // the host's connections (podman: its bridge's gateway), so all 100 are one caller's.
    assert.deepEqual(statuses, [...Array(60).fill(200), ...Array(40).fill(429)]);
    const { stdout } = await stopAndCheck(container);
    assert.deepEqual(stdout.map((line) => line.status), statuses);
    assert.equal(new Set(stdout.map((line) => line.caller)).size, 1, "one caller");
  } finally {
    await container.remove();
  }
});

Deno.test({
  name:
    `offline and read-only: it starts from what the build put in the image, and its HEALTHCHECK passes${
      which.name === "podman" ? "" : " (ignored: docker has no command that runs a healthcheck now)"
    }`,
  ignore: which.name !== "podman",
  async fn() {
    const container = await startContainer(which, {
      flags: [...readOnly(which), "--network", "none"],
      publish: false,
      baseUrl: BASE_URL,
    });
    try {
      // The warm-up builds every representation, loading each npm package serving uses.
      await container.event("warmed up: every representation built");
      const health = await engine(which, ["healthcheck", "run", container.name]);
      assert.equal(health.code, 0, `${health.stdout}${health.stderr}`);
      const { stdout, stderr } = await stopAndCheck(container);
      // The image's HEALTH_PORT: the probe asked the operator port, which no access-log line counts.
      const listening = stderr.find((event) => event.message === "health port listening");
      assert.equal(listening?.address, "http://0.0.0.0:8081/");
      assert.deepEqual(stdout, [], "the probe is in no access-log line");
    } finally {
      await container.remove();
    }
  },
});

Deno.test("on a writable root, serving writes nothing: diff shows only what the engine adds to a container that runs nothing", async () => {
  const idle = `discovery-test-idle-${crypto.randomUUID().slice(0, 8)}`;
  let container: Container | undefined;
  try {
    await engineOk(which, ["run", "--name", idle, ...ULIMITS, "--entrypoint", "true", IMAGE]);
    container = await startContainer(which, { flags: [], publish: true, baseUrl: BASE_URL });
    const url = container.url!;
    for (const path of PATHS) {
      for (const { headers } of variants(path)) {
        const response: Response = await fetch(`${url}${path}`, { headers });
        await response.arrayBuffer();
        assert.ok(
          response.status === 200 || response.status === 404,
          `${path}: ${response.status}`,
        );
      }
    }
    await stopAndCheck(container);
    const written = await diffOf(container.name);
    assert.deepEqual(written, await diffOf(idle), "written by the service");
  } finally {
    await container?.remove();
    await engine(which, ["rm", "--force", idle]);
  }
});
