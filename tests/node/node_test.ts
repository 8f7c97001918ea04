/**
 * The service on Node.js (`lib/node/`), tested against real Node processes of both LTS lines
 * (`tests/_node.ts`: `npx -y node@24`, `node@26`, the packages from `npm ci`):
 *
 * - `npm test` on each, with that Node first on PATH: the handler's tests that need no Deno API, and
 *   Node's entry over a real port (`entry_test.ts`);
 * - every path, method and representation answered as the Deno service answers it (status, fixed
 *   fields, body bytes) and within the OpenAPI contract, as `tests/workers/worker_test.ts` holds the
 *   Worker;
 * - a SIGTERM under keep-alive load: every request sent is answered, each connection told to close;
 * - an idle keep-alive connection kept past Node's default 5 s;
 * - two Node instances (24 and 26) on one Redis: one caller's 100 requests admit 60;
 * - a flood past the descriptor limit (EMFILE, a server `error` event on Node): reported once,
 *   served again after;
 * - start-up errors as one sentence: a bad variable, the port taken, Deno KV.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { dirname } from "node:path";
import { type Contract, decodeBody, loadContract } from "../_contract.ts";
import { exchange, getHead } from "../_keep_alive_load.ts";
import { ensureNodeModules, NODE_LINES, nodeBinary } from "../_node.ts";
import { redisUnavailableReason, startRedis } from "../_redis.ts";
import {
  rawRequest,
  type RawResponse,
  startServer,
  TEST_BASE_URL,
  testContent,
} from "../_server.ts";
import { admitted, sequential, type ServiceProcess, startService } from "../_service_process.ts";
import { buildAnswers } from "../../lib/respond/paths.ts";
import { REPORT_MODE_WARNING } from "../../lib/lifecycle/warnings.ts";
import { checkControls, checkReportMode, CONTROLS_ENV } from "../_controls.ts";

await ensureNodeModules();
const NODES = Object.fromEntries(
  await Promise.all(NODE_LINES.map(async (major) => [major, await nodeBinary(major)] as const)),
) as Record<(typeof NODE_LINES)[number], string>;

/** The configuration both runtimes run with: links from one base, callers by X-Forwarded-For. */
const ENV = {
  PUBLIC_BASE_URL: TEST_BASE_URL,
  ACCESS_LOG: "false",
  TRUSTED_PROXIES: "127.0.0.1",
} as const;

/** Fields that differ between two answers by nature: the date, the connection, the reset. */
const PER_REQUEST = new Set([
  "date",
  "connection",
  "keep-alive",
  "ratelimit",
  "ratelimit-reset",
  "retry-after",
]);

/** The requests sent to each path: methods, representations, codings, a preflight. */
const VARIANTS: ReadonlyArray<{ method: string; headers: Record<string, string> }> = [
  { method: "GET", headers: {} },
  { method: "GET", headers: { accept: "application/json" } },
  { method: "GET", headers: { accept: "text/markdown" } },
  { method: "GET", headers: { accept: "text/html;q=0.9, text/markdown;q=0.8" } },
  { method: "GET", headers: { "accept-encoding": "br" } },
  { method: "GET", headers: { "accept-encoding": "gzip", accept: "text/markdown" } },
  { method: "HEAD", headers: { accept: "text/markdown" } },
  { method: "OPTIONS", headers: {} },
  {
    method: "OPTIONS",
    headers: { origin: "https://app.example.org", "access-control-request-method": "GET" },
  },
  { method: "POST", headers: {} },
  { method: "GET", headers: { host: "bad host" } },
];

/** The fields of `response` that do not change per request, lower-case, sorted. */
function fixedFields(response: RawResponse): Array<[string, string]> {
  return [...response.headers].filter(([name]) => !PER_REQUEST.has(name)).sort();
}

/**
 * Asserts `fromNode` is `fromDeno`: the status, the fixed fields and the body's bytes. Where one
 * sent a content coding the other did not yet have (each builds its compressed bodies in its
 * warm-up, the test server in-process has none), the representation is compared decoded, and each
 * ETag names the bytes its response sent (the SHA-256 of them, and the coding: their compressors
 * differ, lib/node/compress.ts).
 */
function assertSame(fromNode: RawResponse, fromDeno: RawResponse, what: string): void {
  assert.equal(fromNode.status, fromDeno.status, what);
  const coding = (response: RawResponse) => response.headers.get("content-encoding");
  if (coding(fromNode) === coding(fromDeno)) {
    assert.deepEqual(fixedFields(fromNode), fixedFields(fromDeno), what);
    assert.deepEqual(fromNode.body, fromDeno.body, what);
    return;
  }
  const decoded = (response: RawResponse) => ({
    fields: fixedFields(response)
      .filter(([name]) => !["content-encoding", "content-length", "etag"].includes(name)),
    body: decodeBody(response.body, coding(response)),
  });
  assert.deepEqual(decoded(fromNode), decoded(fromDeno), `${what} (decoded)`);
  for (const response of [fromNode, fromDeno]) {
    const tag = createHash("sha256").update(response.body).digest("base64url");
    const suffix = coding(response) === null ? "" : `-${coding(response)}`;
    assert.equal(response.headers.get("etag"), `"${tag}${suffix}"`, `${what}: its ETag`);
  }
}

function checkContract(contract: Contract, method: string, target: string, response: RawResponse) {
  try {
    contract.check(target, method, response);
  } catch (error) {
    throw new Error(`${method} ${target}: ${(error as Error).message}`, { cause: error });
  }
}

/** The longest `npm test` may take on Node (about 50 s on 2 busy cores, 90 s with both lines at once). */
const UNIT_DEADLINE_MS = 180_000;

/** Runs `npm test` on Node `major` (first on PATH), killed past the deadline; its exit and output. */
async function unitTestsOn(major: (typeof NODE_LINES)[number]) {
  const child = new Deno.Command("npm", {
    args: ["test"],
    cwd: new URL("../..", import.meta.url),
    env: { PATH: `${dirname(NODES[major])}:${Deno.env.get("PATH") ?? ""}` },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const deadline = setTimeout(() => child.kill("SIGKILL"), UNIT_DEADLINE_MS);
  const [output, errors, status] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.status,
  ]);
  clearTimeout(deadline);
  return { major, status, output: output + errors };
}

Deno.test("npm test passes on Node 24 and 26: the handler's tests and Node's entry over a real port", async () => {
  for (const { major, status, output } of await Promise.all(NODE_LINES.map(unitTestsOn))) {
    const lines = output.split("\n");
    const passed = Number(/^ℹ pass (\d+)$/m.exec(output)?.[1]);
    const failures = lines.filter((line) => line.startsWith("✖")).join("\n");
    const last = lines.slice(-5).join("\n");
    assert.ok(
      status.success,
      `Node ${major} (${status.signal ?? status.code}): ${failures}${last}`,
    );
    assert.ok(passed >= 90, `Node ${major} ran ${passed} tests`);
    assert.match(output, /^ℹ fail 0$/m);
    // Node's entry's and adapter's tests ran, not ignored (they are, under Deno).
    const entryTests = lines.filter((line) => /^✔ (Node's entry|serveNode\(\)) /.test(line));
    assert.equal(entryTests.length, 5 + 5, `Node ${major}: ${entryTests.join("\n")}`);
  }
});

Deno.test("Node 24 and 26 answer every path, method and representation as the Deno service does, within the contract", async (t) => {
  await using deno = await startServer({ env: { ...ENV } });
  const paths = [...buildAnswers(deno.config, testContent(deno.config)).paths.keys()];
  const windowMs = deno.config.rateLimitWindowSeconds * 1000;
  for (const major of NODE_LINES) {
    const node = await startService({ ...ENV }, 20_000, { node: NODES[major] });
    try {
      const contract = await loadContract(node.url);
      let caller = 0;
      let sent = 0;
      /** One request to both, from a fresh caller every 50 requests. */
      const both = async (target: string, method: string, fields: Record<string, string>) => {
        if (sent++ % 50 === 0) {
          caller++;
          deno.clock.advance(windowMs);
        }
        const headers = { ...fields, "x-forwarded-for": `198.51.${major}.${caller}` };
        return [
          await rawRequest(node.url, target, { method, headers }),
          await rawRequest(deno.url, target, { method, headers }),
        ] as const;
      };
      await t.step(`Node ${major}: every path and variant`, async () => {
        for (const target of [...paths, "/no/such/path"]) {
          for (const { method, headers } of VARIANTS) {
            const [fromNode, fromDeno] = await both(target, method, headers);
            const what = `Node ${major}: ${method} ${target} ${JSON.stringify(headers)}`;
            if (fromNode.status !== 400) checkContract(contract, method, target, fromNode);
            assertSame(fromNode, fromDeno, what);
          }
        }
      });
      await t.step(`Node ${major}: a conditional GET answers 304`, async () => {
        const [first] = await both("/openapi.json", "GET", {});
        const etag = first.headers.get("etag")!;
        const [fromNode, fromDeno] = await both("/openapi.json", "GET", { "if-none-match": etag });
        assert.equal(fromNode.status, 304);
        assert.deepEqual(fixedFields(fromNode), fixedFields(fromDeno));
      });
    } finally {
      await node.stop();
    }
    assert.equal(await node.exited, 0);
  }
});

const KEEP_ALIVE_CONNECTIONS = 32;
/** Requests answered before SIGTERM: the load is under way on every connection. */
const LOAD_BEFORE_SIGTERM = 4 * KEEP_ALIVE_CONNECTIONS;

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}

Deno.test("Node: SIGTERM under keep-alive load answers every request sent and tells each connection to close", async () => {
  const service = await startService({ RATE_LIMIT: "100000" }, 20_000, { node: NODES[24] });
  const port = Number(new URL(service.url).port);
  const conns = await Promise.all(
    Array.from(
      { length: KEEP_ALIVE_CONNECTIONS },
      () => Deno.connect({ hostname: "127.0.0.1", port }),
    ),
  );
  let answered = 0;
  let lost = 0;
  let toldToClose = 0;
  const load = conns.map(async (conn) => {
    try {
      while (true) {
        const response = await exchange(conn, getHead("/api/v1/platform"));
        if (response === undefined) {
          lost++;
          return;
        }
        answered++;
        if (response.close) {
          toldToClose++;
          return;
        }
      }
    } finally {
      conn.close();
    }
  });
  assert.ok(await waitFor(() => answered >= LOAD_BEFORE_SIGTERM, 10_000), "no load within 10 s");
  service.kill("SIGTERM");
  await Promise.all(load);
  assert.equal(await service.exited, 0);
  assert.equal(lost, 0, `${lost} requests lost, ${toldToClose} connections told to close`);
  assert.equal(toldToClose, KEEP_ALIVE_CONNECTIONS);
  const messages = service.events.map((e) => e.message);
  assert.deepEqual(messages.slice(-2), ["shutting down: finishing requests in flight", "stopped"]);
});

/** Longer than Node's default keep-alive timeout and its 1 s allowance (5 s + 1 s): it closes by then. */
const IDLE_MS = 7_000;

Deno.test("Node: an idle keep-alive connection outlives Node's 5 s default (nginx reuses its upstream connections up to 60 s)", async () => {
  const service = await startService({}, 20_000, { node: NODES[26] });
  const port = Number(new URL(service.url).port);
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    assert.equal((await exchange(conn, getHead("/api/v1/platform")))?.status, 200);
    await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
    const again = await exchange(conn, getHead("/api/v1/platform"));
    assert.equal(again?.status, 200, `the connection was closed after ${IDLE_MS} ms idle`);
  } finally {
    conn.close();
    await service.stop();
  }
});

const noRedis = redisUnavailableReason();

Deno.test({
  name: `two Node instances (24 and 26) on one Redis: one caller's 100 requests admit 60${
    noRedis ? ` (ignored: ${noRedis})` : ""
  }`,
  ignore: noRedis !== undefined,
  async fn() {
    const redis = await startRedis();
    const env = {
      TRUSTED_PROXIES: "127.0.0.1",
      RATE_LIMIT_STORE: "redis",
      REDIS_URL: redis.url,
      RATE_LIMIT_STORE_TIMEOUT_MS: "5000",
    };
    let services: ServiceProcess[] = [];
    try {
      services = await Promise.all(
        NODE_LINES.map((major) => startService(env, 20_000, { node: NODES[major] })),
      );
      let outcomes: Awaited<ReturnType<typeof sequential>> = [];
      for (let i = 0; i < 50; i++) {
        for (const service of services) {
          outcomes = outcomes.concat(await sequential(service.url, 1, "203.0.113.60"));
        }
      }
      assert.equal(admitted(outcomes), 60);
      assert.deepEqual(outcomes.slice(60).map((o) => o.code), Array(40).fill("rate_limited"));
    } finally {
      await Promise.all(services.map((service) => service.stop()));
      await redis.stop();
    }
  },
});

/**
 * Past the descriptor limit, libuv accepts each waiting connection on a descriptor it keeps in
 * reserve and closes it at once (`uv__emfile_trick`): the clients are reset and Node's server sees
 * no `error` event unless that trick fails too; the entry reports one when it comes (`serve.ts`).
 */
Deno.test("Node: a flood past the descriptor limit does not end the process: it serves the open connections and again after", async () => {
  const service = await startService({ RATE_LIMIT: "100000" }, 20_000, {
    node: NODES[24],
    descriptorLimit: 256,
  });
  const port = Number(new URL(service.url).port);
  const flood: Deno.Conn[] = [];
  // Every module loaded first: under the flood, a module's file could not be opened either. The
  // warm-up builds and compresses every representation: over 10 s once, with two suites running.
  assert.ok(
    await waitFor(() => service.events.some((e) => /^warmed up/.test(String(e.message))), 30_000),
    "the warm-up's event",
  );
  const kept = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    assert.equal((await exchange(kept, getHead("/api/v1/platform")))?.status, 200);
    for (let i = 0; i < 400; i++) {
      try {
        flood.push(await Deno.connect({ hostname: "127.0.0.1", port }));
      } catch {
        // Refused or reset: what the flood is for.
      }
    }
    // The connection accepted before the flood is still served during it.
    assert.equal((await exchange(kept, getHead("/api/v1/platform")))?.status, 200);
    for (const conn of flood.splice(0)) conn.close();
    let status: number | undefined;
    const released = Date.now();
    while (status !== 200 && Date.now() - released < 5000) {
      status = await fetch(`${service.url}/api/v1/platform`)
        .then(async (response) => (await response.body?.cancel(), response.status))
        .catch(() => undefined);
      if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.equal(status, 200, "not serving again within 5 s of the flood's end");
    kept.close();
    await service.stop();
    assert.equal(await service.exited, 0);
    assert.deepEqual(service.events.filter((e) => e.level === "error"), []);
  } finally {
    for (const conn of flood) conn.close();
    try {
      kept.close();
    } catch { /* closed above */ }
    await service.stop();
  }
});

/** Starts Node's entry with `env` and returns its exit code and stderr. */
async function failedStart(env: Record<string, string>): Promise<{ code: number; stderr: string }> {
  const run = await new Deno.Command(NODES[24], {
    args: [new URL("../../lib/node/main.ts", import.meta.url).pathname],
    env: { HOSTNAME: "127.0.0.1", PUBLIC_BASE_URL: "http://127.0.0.1", ...env },
    stdout: "null",
    stderr: "piped",
  }).output();
  return { code: run.code, stderr: new TextDecoder().decode(run.stderr).trim() };
}

Deno.test("Node: a start that cannot serve ends in one sentence naming the variable, exit 1", async () => {
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const [port, bad, kv] = await Promise.all([
    failedStart({ PORT: String(taken.addr.port) }),
    failedStart({ PORT: "0", RATE_LIMIT: "lots" }),
    failedStart({ PORT: "0", RATE_LIMIT_STORE: "kv" }),
  ]);
  assert.equal(port.code, 1);
  assert.equal(
    port.stderr,
    `Cannot listen on 127.0.0.1:${taken.addr.port}: PORT ${taken.addr.port} is already in use, so stop the process holding it or set PORT to a free port; nothing is served.`,
  );
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /RATE_LIMIT/);
  assert.equal(bad.stderr.split("\n").filter((line) => line.startsWith("  - ")).length, 1);
  assert.equal(kv.code, 1);
  assert.match(kv.stderr, /RATE_LIMIT_STORE=kv needs Deno/);
});

Deno.test("Node: the operator controls as on Deno (exempt, deny, report mode with its warning on every start)", async () => {
  const proxied = { TRUSTED_PROXIES: "127.0.0.1" };
  const as = (address: string) => ({ "x-forwarded-for": address });
  const enforcing = await startService({ ...proxied, ...CONTROLS_ENV }, 20_000, {
    node: NODES[24],
  });
  try {
    await checkControls(enforcing.url, as);
  } finally {
    await enforcing.stop();
  }
  const reporting = await startService({ ...proxied, RATE_LIMIT_MODE: "report" }, 20_000, {
    node: NODES[26],
  });
  try {
    await checkReportMode(reporting.url, as);
    assert.ok(
      reporting.events.some((e) => e.level === "warn" && e.message === REPORT_MODE_WARNING),
      "the report-mode warning, as a JSON event on stderr",
    );
  } finally {
    await reporting.stop();
  }
});
