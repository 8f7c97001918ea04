/**
 * Tests of the production setup for a VM in deploy/: the systemd template unit passes `systemd-analyze
 * verify` and its offline security review, and nginx, run from the shipped configuration (loopback
 * ports substituted in, and short client timeouts for the test that times clients out) in front of
 * the real service, cuts idle and slow clients, serves normal ones, keeps one rate limit per client
 * address, and loses no request while its two instances are restarted one at a time.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { freePort, waitForPort } from "./_redis.ts";
import { type ServiceProcess, startService } from "./_service_process.ts";
import { AnswerCounter, getHead, keepAliveLoad } from "./_keep_alive_load.ts";
import { findTool, toolUnavailableReason } from "./_tools.ts";
import { STOP_DEADLINE_MS } from "../lib/lifecycle/stop.ts";
import { exitFlushBoundMs } from "../lib/telemetry/enabled.ts";
import { EXIT_WATCHDOG_MARGIN_MS } from "../lib/telemetry/otel.ts";
import { loadConfig } from "../lib/config/config.ts";
import { recordEnv } from "../lib/config/env.ts";
import { MOST_TIMEOUTS_PER_DECISION } from "../lib/limit/guard/guarded_store.ts";
import {
  DEPLOY,
  get,
  hangTimeouts,
  NGINX_CONF,
  noNginx,
  serviceSettings,
  startNginx,
  TEST_TIMEOUT_S,
  UNIT,
} from "./_nginx.ts";

/** The instances the operator's guide runs: one per port, both named in nginx.conf. */
const INSTANCES = ["8001", "8002"];
const BINARY = "/usr/local/bin/discovery";

/** The highest overall exposure `systemd-analyze security` may give the unit (0 best, 10 worst). */
const MAX_EXPOSURE = 3.0;

/** deploy/discovery-node@.service as shipped: the same recipe on Node.js. */
const NODE_UNIT = Deno.readTextFileSync(join(DEPLOY, "discovery-node@.service"));
const NODE_BINARY = "/usr/bin/node";

/** The two units of the VM recipe: the Deno binary's and Node's, each with what it runs. */
const UNITS = [
  { file: "discovery@.service", text: UNIT, binary: BINARY },
  { file: "discovery-node@.service", text: NODE_UNIT, binary: NODE_BINARY },
];

/** An instance of a unit with ExecStart pointing at a stub executable: verify needs the binary. */
function unitWithStubBinary(unit: typeof UNITS[number]): string {
  const dir = Deno.makeTempDirSync();
  const stub = join(dir, "stub");
  Deno.writeTextFileSync(stub, "#!/bin/sh\nexit 0\n", { mode: 0o755 });
  assert.match(unit.text, new RegExp(`^ExecStart=${unit.binary}( |$)`, "m"));
  Deno.writeTextFileSync(
    join(dir, unit.file),
    unit.text.replace(`ExecStart=${unit.binary}`, `ExecStart=${stub}`),
  );
  return join(dir, unit.file.replace("@.", `@${INSTANCES[0]}.`));
}

const noSystemd = toolUnavailableReason("systemd-analyze", "systemd");

for (const unit of UNITS) {
  Deno.test({
    name: `deploy/${unit.file} passes systemd-analyze verify with no warning${
      noSystemd ? ` (ignored: ${noSystemd})` : ""
    }`,
    ignore: noSystemd !== undefined,
    async fn() {
      const output = await new Deno.Command(findTool("systemd-analyze")!, {
        args: ["verify", unitWithStubBinary(unit)],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const said = new TextDecoder().decode(output.stderr) +
        new TextDecoder().decode(output.stdout);
      assert.equal(output.code, 0, said);
      assert.equal(said.trim(), "");
    },
  });

  Deno.test({
    name: `deploy/${unit.file} is hardened: offline exposure at most ${MAX_EXPOSURE}${
      noSystemd ? ` (ignored: ${noSystemd})` : ""
    }`,
    ignore: noSystemd !== undefined,
    async fn() {
      const output = await new Deno.Command(findTool("systemd-analyze")!, {
        args: ["security", "--offline=true", "--no-pager", unitWithStubBinary(unit)],
        env: { NO_COLOR: "1", SYSTEMD_COLORS: "0" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(output.stdout);
      const exposure = Number(/Overall exposure level for \S+: ([\d.]+)/.exec(text)?.[1]);
      assert.ok(exposure <= MAX_EXPOSURE, `exposure ${exposure}:\n${text}`);
    },
  });
}

Deno.test("deploy/discovery-node@.service hardens as deploy/discovery@.service does, and shares a SQLite hit log", () => {
  const deno = serviceSettings(UNIT);
  const node = serviceSettings(NODE_UNIT);
  // What runs, and the store, differ; every other setting is the Deno unit's, hardening included.
  const differ = new Set(["ExecStart", "WorkingDirectory", "Environment"]);
  for (const [key, values] of deno) {
    if (!differ.has(key)) assert.deepEqual(node.get(key), values, key);
  }
  assert.deepEqual([...node.keys()].filter((key) => !deno.has(key)), ["WorkingDirectory"]);
  assert.equal(node.get("ExecStart")![0], `${NODE_BINARY} /opt/discovery/lib/node/main.ts`);
  const env = (settings: Map<string, string[]>) =>
    Object.fromEntries(settings.get("Environment")!.map((pair) => pair.split("=", 2)));
  const { RATE_LIMIT_STORE: _a, KV_PATH: _b, ...denoRest } = env(deno);
  const { RATE_LIMIT_STORE: store, SQLITE_PATH: path, ...nodeRest } = env(node);
  assert.deepEqual(nodeRest, denoRest);
  assert.equal(store, "sqlite");
  assert.match(path!, new RegExp(`^/var/lib/${node.get("StateDirectory")![0]}/`));
});

Deno.test("deploy/discovery@.service restarts on failure, allows many descriptors and trusts the local nginx", () => {
  const settings = serviceSettings(UNIT);
  const one = (key: string) => {
    const values = settings.get(key);
    assert.equal(values?.length, 1, `${key}: ${values}`);
    return values[0]!;
  };
  assert.equal(one("ExecStart"), BINARY);
  assert.equal(one("Restart"), "on-failure");
  assert.ok(Number(one("LimitNOFILE")) >= 65_536);
  for (const key of ["DynamicUser", "NoNewPrivileges", "PrivateTmp", "ProtectHome"]) {
    assert.equal(one(key), "yes", key);
  }
  assert.equal(one("ProtectSystem"), "strict");
  assert.equal(one("CapabilityBoundingSet"), "");
  const env = Object.fromEntries(
    settings.get("Environment")!.map((pair) => pair.split("=") as [string, string]),
  );
  assert.equal(env.HOSTNAME, "127.0.0.1");
  assert.equal(env.TRUSTED_PROXIES, "127.0.0.1,::1");
  // Each instance listens on its own name's port, and nginx proxies to both instances.
  assert.equal(env.PORT, "%i");
  // Both groups: the one every request tries first and the last resort (deploy/nginx.conf).
  for (const group of ["discovery", "discovery_last_resort"]) {
    const upstream = new RegExp(`upstream ${group} \\{([^}]*)\\}`).exec(NGINX_CONF)![1]!;
    const servers = [...upstream.matchAll(/server 127\.0\.0\.1:(\d+)/g)].map((m) => m[1]);
    assert.deepEqual(servers, INSTANCES, group);
  }
  // A request an instance does not answer goes to the other one, idempotent requests only.
  assert.match(NGINX_CONF, /proxy_next_upstream error timeout http_502 http_503;/);
  assert.doesNotMatch(NGINX_CONF, /non_idempotent/);
  assert.match(NGINX_CONF, /proxy_next_upstream_tries 2;/);
});

/**
 * What a unit's `TimeoutStopSec` must leave beyond the longest exit the service makes itself, so
 * that systemd's SIGKILL never comes first (and marks the unit failed).
 */
const STOP_ROOM_MS = 5_000;

Deno.test("both units give the longest exit the service makes itself (the stop's deadline, then the exit watchdog's default bound) time to end", () => {
  // The watchdog's bound with OTEL_EXPORTER_OTLP_TIMEOUT unset (Deno's 10 s per export).
  const longest = STOP_DEADLINE_MS + exitFlushBoundMs(() => undefined) + EXIT_WATCHDOG_MARGIN_MS;
  assert.equal(longest, 34_500);
  for (const unit of UNITS) {
    const [timeout] = serviceSettings(unit.text).get("TimeoutStopSec") ?? [];
    assert.match(timeout ?? "", /^\d+$/, `${unit.file}: TimeoutStopSec in seconds`);
    assert.ok(
      Number(timeout) * 1000 >= longest + STOP_ROOM_MS,
      `${unit.file}: TimeoutStopSec=${timeout} leaves less than ${STOP_ROOM_MS} ms beyond ${longest} ms`,
    );
  }
});

/** The trickling client's pause between two bytes of its request head. */
const TRICKLE_MS = 100;
/** How late after its timeout nginx may cut a connection and still pass. */
const CUT_MARGIN_MS = 2000;

/** How long until the peer closes `conn`, reading (and dropping) whatever it sends. */
async function msUntilClosed(conn: Deno.Conn, started: number): Promise<number> {
  const buffer = new Uint8Array(4096);
  while (true) {
    const read = await conn.read(buffer).catch(() => null);
    if (read === null) return Date.now() - started;
  }
}

Deno.test({
  name:
    `nginx from deploy/nginx.conf cuts idle and slow clients, serves normal ones, one rate limit per client${
      noNginx ? ` (ignored: ${noNginx})` : ""
    }`,
  ignore: noNginx !== undefined,
  async fn() {
    const service = await startService({ TRUSTED_PROXIES: "127.0.0.1,::1", RATE_LIMIT: "3" });
    const servicePort = Number(new URL(service.url).port);
    const nginx = await startNginx([servicePort, servicePort], { shortTimeouts: true });
    const port = nginx.port;
    const held: Deno.Conn[] = [];
    try {
      await waitForPort(port, 5000);
      // An idle client and one trickling its request head, one byte at a time.
      const started = Date.now();
      const idle = await Deno.connect({ hostname: "127.0.0.1", port });
      const slow = await Deno.connect({ hostname: "127.0.0.1", port });
      held.push(idle, slow);
      const idleCut = msUntilClosed(idle, started);
      const slowCut = msUntilClosed(slow, started);
      // The head never ends: a header value that grows by one byte every TRICKLE_MS.
      const bytes = new TextEncoder().encode(
        `GET /api/v1/platform HTTP/1.1\r\nHost: x\r\nX-Slow: ${"a".repeat(100)}`,
      );
      let trickling = true;
      const trickle = (async () => {
        for (let i = 0; trickling && i < bytes.length; i++) {
          await slow.write(bytes.subarray(i, i + 1)).catch(() => trickling = false);
          await new Promise((resolve) => setTimeout(resolve, TRICKLE_MS));
        }
      })();

      // Meanwhile normal clients are served, each address with its own limit.
      assert.deepEqual(await get(port, "127.0.0.1"), { status: 200, remaining: "2" });
      assert.deepEqual(await get(port, "127.0.0.1"), { status: 200, remaining: "1" });
      assert.deepEqual(await get(port, "127.0.0.1"), { status: 200, remaining: "0" });
      assert.equal((await get(port, "127.0.0.1")).status, 429);
      // A forwarded header from the client does not choose the key: nginx replaces it.
      const other = await get(port, "127.0.0.2", { "x-forwarded-for": "127.0.0.1" });
      assert.deepEqual(other, { status: 200, remaining: "2" });

      const limit = TEST_TIMEOUT_S * 1000 + CUT_MARGIN_MS;
      const [idleMs, slowMs] = await Promise.all([idleCut, slowCut]);
      trickling = false;
      await trickle;
      assert.ok(idleMs <= limit, `idle client cut after ${idleMs} ms`);
      assert.ok(slowMs <= limit, `trickling client cut after ${slowMs} ms`);

      // A keep-alive connection left idle after a request is closed too.
      const keptAlive = await Deno.connect({ hostname: "127.0.0.1", port });
      held.push(keptAlive);
      await keptAlive.write(
        new TextEncoder().encode("GET /llms.txt HTTP/1.1\r\nHost: x\r\n\r\n"),
      );
      const keptMs = await msUntilClosed(keptAlive, Date.now());
      assert.ok(keptMs <= limit, `idle keep-alive connection cut after ${keptMs} ms`);
    } finally {
      for (const conn of held) {
        try {
          conn.close();
        } catch { /* closed */ }
      }
      await nginx.stop();
      await service.stop();
    }
  },
});

/** A stub instance on `port` that answers every request with its own name. */
function stubInstance(port: number, name: string): Deno.HttpServer {
  return Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, () => new Response(name));
}

/** Which stub answered a GET through nginx on `port` (its body), or the status nginx gave instead. */
async function answeredBy(port: number): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${port}/api/v1/platform`);
  const body = await response.text();
  return response.status === 200 ? body : `status ${response.status}`;
}

Deno.test({
  name:
    `nginx from deploy/nginx.conf sends a caller to the other instance while its own is down, and answers it when the other stops the moment its own is back${
      noNginx ? ` (ignored: ${noNginx})` : ""
    }`,
  ignore: noNginx !== undefined,
  async fn() {
    const ports: [number, number] = [freePort(), freePort()];
    const names = ["first", "second"];
    const servers = ports.map((port, i) => stubInstance(port, names[i]!));
    const nginx = await startNginx(ports);
    try {
      // The caller's instance (the hash of 127.0.0.1) and the other.
      const own = names.indexOf(await answeredBy(nginx.port));
      const other = 1 - own;
      assert.ok(own >= 0);
      // Its instance stops: nginx sends the caller to the other.
      await servers[own]!.shutdown();
      assert.equal(await answeredBy(nginx.port), names[other]);
      // Its instance answers again, and the other stops at once (the rolling restart): nginx
      // still counts its own as failed (until a probe, fail_timeout later), so its first group has
      // no instance left, and the last resort answers from its own instance. Without
      // @last_resort: 502, "no live upstreams", to every request until the probe.
      servers[own] = stubInstance(ports[own]!, names[own]!);
      await servers[other]!.shutdown();
      assert.equal(await answeredBy(nginx.port), names[own]);
      assert.equal(await answeredBy(nginx.port), names[own]);
    } finally {
      await nginx.stop();
      await Promise.allSettled(servers.map((server) => server.shutdown()));
    }
  },
});

/** A GET through nginx on `port`: which stub answered (or nginx's status), and how long it took. */
async function timedAnswer(port: number): Promise<{ by: string; ms: number }> {
  const started = performance.now();
  const by = await answeredBy(port);
  return { by, ms: performance.now() - started };
}

Deno.test({
  name:
    `nginx from deploy/nginx.conf answers a hung instance's caller from the other instance after one read timeout, then at once${
      noNginx ? ` (ignored: ${noNginx})` : ""
    }`,
  ignore: noNginx !== undefined,
  async fn() {
    const ports: [number, number] = [freePort(), freePort()];
    const names = ["first", "second"];
    const servers = ports.map((port, i) => stubInstance(port, names[i]!));
    const nginx = await startNginx(ports);
    const { readTimeoutMs } = hangTimeouts();
    const held: Deno.Conn[] = [];
    let hung: Deno.Listener | undefined;
    let holding: Promise<void> | undefined;
    try {
      const own = names.indexOf(await answeredBy(nginx.port));
      assert.ok(own >= 0);
      // Its instance hangs: it accepts connections (as the kernel does for a stopped process) and
      // never answers.
      await servers[own]!.shutdown();
      hung = Deno.listen({ hostname: "127.0.0.1", port: ports[own]! });
      const listener = hung;
      holding = (async () => {
        for await (const conn of listener) held.push(conn);
      })();
      const first = await timedAnswer(nginx.port);
      assert.equal(first.by, names[1 - own]);
      assert.ok(first.ms >= readTimeoutMs - 100, `the first answer took ${first.ms} ms`);
      // The next ones are not sent to the hung instance: answered at once (with max_fails=0, each
      // waited a read timeout).
      for (let i = 0; i < 3; i++) {
        const next = await timedAnswer(nginx.port);
        assert.equal(next.by, names[1 - own]);
        assert.ok(next.ms < readTimeoutMs / 2, `answer ${i + 2} took ${next.ms} ms`);
      }
    } finally {
      await nginx.stop();
      hung?.close();
      await holding?.catch(() => {});
      for (const conn of held) conn.close();
      await Promise.allSettled(servers.map((server) => server.shutdown()));
    }
  },
});

/** Connections of the client that counts every answer during the rolling restarts. */
const ROLLING_CLIENTS = 8;
/** Answers the load gets before the first restart and after each one, before the next. */
const ANSWERS_PER_STEP = 100;

Deno.test({
  name:
    `two instances behind deploy/nginx.conf restarted one at a time, twice: every request answered 200${
      noNginx ? ` (ignored: ${noNginx})` : ""
    }`,
  ignore: noNginx !== undefined,
  async fn() {
    const ports: [number, number] = [freePort(), freePort()];
    const env = (port: number) => ({
      TRUSTED_PROXIES: "127.0.0.1,::1",
      RATE_LIMIT: "1000000",
      PORT: String(port),
    });
    const instances: ServiceProcess[] = [];
    for (const port of ports) instances.push(await startService(env(port)));
    const nginx = await startNginx(ports);
    const { promise: restarted, resolve: finish } = Promise.withResolvers<void>();
    const answers = new AnswerCounter();
    const load = keepAliveLoad({
      port: nginx.port,
      connections: ROLLING_CLIENTS,
      until: restarted,
      request: () => getHead("/api/v1/platform"),
      reconnect: true,
      onAnswered: answers.onAnswered,
    });
    const exits: number[] = [];
    let errorLog = "";
    try {
      await answers.after(ANSWERS_PER_STEP);
      // The operator's procedure (deploy/README.md): stop one instance, start it, wait until it
      // answers, then the other at once; here twice over, with load through nginx in between.
      for (const index of [0, 1, 0, 1]) {
        instances[index]!.kill("SIGTERM");
        exits.push(await instances[index]!.exited);
        instances[index] = await startService(env(ports[index]!));
        const direct = await fetch(`${instances[index]!.url}/api/v1/platform`);
        await direct.body?.cancel();
        assert.equal(direct.status, 200);
        await answers.after(ANSWERS_PER_STEP);
      }
    } finally {
      finish();
      await load;
      errorLog = nginx.errorLog();
      await nginx.stop();
      for (const instance of instances) await instance.stop();
    }
    const outcome = await load;
    assert.deepEqual(exits, [0, 0, 0, 0]);
    assert.deepEqual(
      { lost: outcome.lost, refused: outcome.refused, statuses: [...outcome.answered.keys()] },
      { lost: 0, refused: 0, statuses: [200] },
      `nginx's error log:\n${errorLog}`,
    );
  },
});

Deno.test("deploy/Dockerfile pins the Deno of CI, builds as root and starts as a non-root user with deno task start", () => {
  const dockerfile = Deno.readTextFileSync(join(DEPLOY, "Dockerfile"));
  const ciDeno = /deno@(\d+\.\d+\.\d+)/.exec(
    Deno.readTextFileSync(join(DEPLOY, "..", ".ci", "run")),
  )![1];
  // One instruction a line: comments and blank lines out, continuation lines joined.
  const lines = dockerfile.replace(/\\\n/g, " ").split("\n")
    .filter((line) => line !== "" && !line.startsWith("#"));
  assert.equal(lines[0], `FROM denoland/deno:${ciDeno}`);
  const user = lines.findIndex((line) => line.startsWith("USER "));
  assert.equal(lines[user], "USER deno");
  // The build runs before USER (as root, over the copied checkout); nothing is written after it.
  const build = lines.findIndex((line) => /^RUN .*&& deno task build &&/.test(line));
  assert.ok(build >= 0 && build < user, dockerfile);
  assert.ok(!lines.slice(user).some((line) => line.startsWith("RUN ")), dockerfile);
  // `-q`: no `Task start` line among the container's JSON lines (tests/container/).
  assert.equal(lines.at(-1), 'CMD ["task", "-q", "start"]');
});

Deno.test({
  name:
    `nginx from deploy/nginx.conf clears the client's own Forwarded and replaces its X-Forwarded-For${
      noNginx ? ` (skipped: ${noNginx})` : ""
    }`,
  ignore: noNginx !== undefined,
  async fn() {
    // Upstreams that answer with the forwarded headers they received.
    const seen: Record<string, string | null>[] = [];
    const upstream = (request: Request) => {
      seen.push({
        forwarded: request.headers.get("forwarded"),
        xff: request.headers.get("x-forwarded-for"),
      });
      return new Response("ok");
    };
    const servers = [0, 1].map(() =>
      Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, upstream)
    );
    const nginx = await startNginx([servers[0]!.addr.port, servers[1]!.addr.port]);
    try {
      const response = await get(nginx.port, "127.0.0.1", {
        forwarded: "for=198.51.100.66",
        "x-forwarded-for": "198.51.100.67",
      });
      assert.equal(response.status, 200);
      assert.deepEqual(seen, [{ forwarded: null, xff: "127.0.0.1" }]);
    } finally {
      await nginx.stop();
      await Promise.all(servers.map((server) => server.shutdown()));
    }
  },
});

Deno.test("nginx's read timeout outlasts the longest decision at the default store timeout, and deploy/README.md and nginx.conf state the rule by MOST_TIMEOUTS_PER_DECISION", () => {
  const loaded = loadConfig(recordEnv({}));
  assert.ok(loaded.ok);
  const storeTimeoutMs = loaded.config.rateLimitStoreTimeoutMs;
  const { readTimeoutMs } = hangTimeouts();
  // A second beside the store's timeouts for the event loop's own delays (deploy/README.md).
  assert.ok(
    readTimeoutMs >= MOST_TIMEOUTS_PER_DECISION * storeTimeoutMs + 1000,
    `proxy_read_timeout ${readTimeoutMs} ms`,
  );
  // The largest store timeout the shipped read timeout holds: above it, the rule must be applied.
  const above = Math.floor((readTimeoutMs - 1000) / MOST_TIMEOUTS_PER_DECISION / 100) * 100;
  const rule = new RegExp(
    `RATE_LIMIT_STORE_TIMEOUT_MS\`? above ${above} ms, keep .{0,60}at ${MOST_TIMEOUTS_PER_DECISION} times it plus 1 s or more`,
  );
  const readme = Deno.readTextFileSync(join(DEPLOY, "README.md"));
  const flat = (text: string) => text.replace(/\n\s*#?\s*/g, " ");
  assert.match(flat(readme), rule);
  assert.match(flat(NGINX_CONF), rule);
});
