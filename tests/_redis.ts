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
  /** `redis://127.0.0.1:<port>` (`rediss://` with TLS; never with the password). */
  url: string;
  /** The port, kept across restarts. */
  port: number;
  /** Kills the server (SIGKILL: an outage, not a shutdown) and waits for it to exit. */
  stop(): Promise<void>;
  /** Starts it again on the same port, empty, and waits until it answers. */
  start(): Promise<void>;
}

/** Where {@linkcode freePort} picks: below Linux's ephemeral range (32768–60999 by default). */
const FREE_PORTS = { min: 10_000, max: 32_767 };
/** The ports {@linkcode freePort} returned in this test file. */
const handedOut = new Set<number>();

/**
 * A port that was free a moment ago on 127.0.0.1, for a process the test starts on it (and may start
 * again on it). Picked at random below the kernel's ephemeral range, so that the suite's other files,
 * running in parallel, cannot be handed it for a listener on port 0 or an outgoing connection while
 * the process is starting or stopped; a port found in use is skipped.
 */
export function freePort(): number {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = FREE_PORTS.min +
      Math.floor(Math.random() * (FREE_PORTS.max - FREE_PORTS.min + 1));
    // Not one handed out before and perhaps not bound yet (a cluster's ports are picked together).
    if (handedOut.has(port)) continue;
    try {
      Deno.listen({ hostname: "127.0.0.1", port }).close();
      handedOut.add(port);
      return port;
    } catch (error) {
      if (!(error instanceof Deno.errors.AddrInUse)) throw error;
    }
  }
  throw new Error(`no free port in ${FREE_PORTS.min}–${FREE_PORTS.max} after 100 tries`);
}

/** Options of {@linkcode startRedis}. */
export interface RedisOptions {
  /** `requirepass`. */
  password?: string;
  /** TLS only (see {@linkcode makeTestTls}); the URL is then `rediss://`. */
  tls?: TestTls;
}

/** Starts `redis-server` on a free loopback port and waits until it accepts connections. */
export async function startRedis(options: RedisOptions = {}): Promise<TestRedis> {
  const port = freePort();
  let child: Deno.ChildProcess | undefined;
  const start = async () => {
    child = new Deno.Command("redis-server", {
      args: [
        ...(options.tls === undefined ? ["--port", String(port)] : tlsArgs(port, options.tls)),
        ...["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "yes"],
        ...(options.password === undefined ? [] : ["--requirepass", options.password]),
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
  return { url: `${options.tls ? "rediss" : "redis"}://127.0.0.1:${port}`, port, stop, start };
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

/** One `redis-server` process of a topology, restartable on its port with its own folder. */
interface Node {
  port: number;
  args: string[];
  child: Deno.ChildProcess | undefined;
}

function spawnNode(node: Node, dir: string): void {
  node.child = new Deno.Command("redis-server", {
    args: node.args,
    cwd: dir,
    stdout: "null",
    stderr: "null",
  }).spawn();
}

async function killNode(node: Node, signal: Deno.Signal = "SIGKILL"): Promise<void> {
  const child = node.child;
  if (child === undefined) return;
  node.child = undefined;
  try {
    child.kill(signal);
  } catch {
    // Already exited.
  }
  await child.status;
}

/** Runs `redis-cli` with `args` and returns its output; throws when it fails. */
export async function redisCli(args: string[]): Promise<string> {
  const out = await new Deno.Command("redis-cli", { args, stdout: "piped", stderr: "piped" })
    .output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(`redis-cli ${args.join(" ")}: ${text}${new TextDecoder().decode(out.stderr)}`);
  }
  return text;
}

/** Polls `check` every 50 ms until it holds, at most `timeoutMs`; throws naming `what` otherwise. */
export async function pollUntil(
  check: () => Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Throwaway TLS files of test servers: a CA and a certificate for 127.0.0.1 that it signed. */
export interface TestTls {
  /** The CA certificate (PEM) clients trust: `redis-cli --cacert`, `DENO_CERT` for the service. */
  ca: string;
  /** The servers' certificate (PEM), for IP 127.0.0.1 and localhost. */
  cert: string;
  /** The servers' private key (PEM). */
  key: string;
}

/**
 * Makes a CA and a server certificate for 127.0.0.1 signed by it in `dir` with `openssl`, valid for
 * a day. The keys live in the test's temporary folder only.
 */
export async function makeTestTls(dir: string): Promise<TestTls> {
  const tls = { ca: `${dir}/ca.crt`, cert: `${dir}/redis.crt`, key: `${dir}/redis.key` };
  const caKey = `${dir}/ca.key`;
  const csr = `${dir}/redis.csr`;
  const ext = `${dir}/san.ext`;
  await Deno.writeTextFile(ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
  const steps = [
    ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", caKey, "-out", tls.ca],
    ["-days", "1", "-subj", "/CN=discovery test CA"],
    ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", tls.key, "-out", csr],
    ["-subj", "/CN=127.0.0.1"],
    ["x509", "-req", "-in", csr, "-CA", tls.ca, "-CAkey", caKey, "-CAcreateserial"],
    ["-out", tls.cert, "-days", "1", "-extfile", ext],
  ];
  for (let i = 0; i < steps.length; i += 2) {
    const out = await new Deno.Command("openssl", {
      args: [...steps[i]!, ...steps[i + 1]!],
      stdout: "null",
      stderr: "piped",
    }).output();
    if (!out.success) throw new Error(`openssl: ${new TextDecoder().decode(out.stderr)}`);
  }
  return tls;
}

/** Why the TLS tests cannot run here (no `openssl`), or undefined when they can. */
export function tlsUnavailableReason(): string | undefined {
  const found = Deno.env.get("PATH")?.split(":").some((dir) => {
    try {
      return Deno.statSync(`${dir}/openssl`).isFile;
    } catch {
      return false;
    }
  });
  return found ? undefined : "openssl is not on PATH (apt-get install openssl)";
}

/** A data node's TLS-only arguments: no plain port, TLS for clients, replication and cluster bus. */
function tlsArgs(port: number, tls: TestTls): string[] {
  return [
    ...["--port", "0", "--tls-port", String(port), "--tls-auth-clients", "no"],
    ...["--tls-cert-file", tls.cert, "--tls-key-file", tls.key, "--tls-ca-cert-file", tls.ca],
    ...["--tls-replication", "yes", "--tls-cluster", "yes"],
  ];
}

/** `redis-cli`'s password and TLS arguments. */
function cliArgs(password: string | undefined, tls: TestTls | undefined): string[] {
  return [
    ...(password === undefined ? [] : ["--no-auth-warning", "-a", password]),
    ...(tls === undefined ? [] : ["--tls", "--cacert", tls.ca]),
  ];
}

/** The persistence-free, loopback-only arguments every test node shares. */
function baseArgs(port: number, tls?: TestTls): string[] {
  return [
    ...(tls === undefined ? ["--port", String(port)] : tlsArgs(port, tls)),
    ...["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
    // A replica's first sync starts at once, not after the default 5 s wait for more replicas.
    ...["--repl-diskless-sync-delay", "0"],
  ];
}

/** A running 6-node Redis Cluster: 3 primaries, one replica each. */
export interface TestCluster extends AsyncDisposable {
  /** The seed URLs (`redis://127.0.0.1:<port>`, `rediss://` with TLS), every node. */
  urls: string[];
  /** `cluster-node-timeout`, in ms: a primary is failed over about this long after it stops. */
  nodeTimeoutMs: number;
  /** The port of the primary that owns `key`'s slot now. */
  primaryOf(key: string): Promise<number>;
  /** Kills the node on `port` (SIGKILL) and waits for it to exit. */
  kill(port: number): Promise<void>;
  /** Kills every node (SIGKILL). */
  stopAll(): Promise<void>;
  /** Starts every stopped node again (empty, same ports and cluster configuration). */
  startAll(): Promise<void>;
  /** Waits until every running node reports `cluster_state:ok`. */
  healthy(timeoutMs?: number): Promise<void>;
  /** Kills every node and removes the folders. */
  close(): Promise<void>;
}

/** Options of {@linkcode startCluster}. */
export interface ClusterOptions {
  /** `cluster-node-timeout` in ms (default 1000). */
  nodeTimeoutMs?: number;
  /** `requirepass` and `masterauth` of every node. */
  password?: string;
  /** Replicas per primary: 1 (default, 6 nodes) or 0 (3 primaries alone, for benchmarks). */
  replicas?: 0 | 1;
  /** TLS only, for clients, replication and the cluster bus (see {@linkcode makeTestTls}). */
  tls?: TestTls;
}

/**
 * Starts a 6-node cluster (3 primaries + 3 replicas) on free loopback ports, each node in its own
 * temporary folder, and waits until every node reports `cluster_state:ok` and every replica is in
 * sync. Everything is killed again if it fails to form.
 */
export async function startCluster(options: ClusterOptions = {}): Promise<TestCluster> {
  const nodeTimeoutMs = options.nodeTimeoutMs ?? 1000;
  const root = await Deno.makeTempDir({ prefix: "redis-cluster-" });
  const auth = options.password === undefined
    ? []
    : ["--requirepass", options.password, "--masterauth", options.password];
  const cliAuth = cliArgs(options.password, options.tls);
  const replicas = options.replicas ?? 1;
  const nodes: Node[] = Array.from({ length: 3 * (1 + replicas) }, () => {
    const port = freePort();
    return {
      port,
      child: undefined,
      args: [
        ...baseArgs(port, options.tls),
        ...auth,
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        `nodes-${port}.conf`,
        // The bus on a free port of its own too (by default the port + 10000, which may be taken).
        "--cluster-port",
        String(freePort()),
        "--cluster-node-timeout",
        String(nodeTimeoutMs),
        // A replica takes over however long its link was down: the tests kill primaries at will.
        "--cluster-replica-validity-factor",
        "0",
      ],
    };
  });
  const dirOf = (node: Node) => `${root}/${node.port}`;
  const cli = (port: number, args: string[]) => redisCli(["-p", String(port), ...cliAuth, ...args]);
  const startAll = async () => {
    for (const node of nodes) {
      if (node.child !== undefined) continue;
      await Deno.mkdir(dirOf(node), { recursive: true });
      spawnNode(node, dirOf(node));
    }
    await Promise.all(nodes.map((node) => waitForPort(node.port, 5000)));
  };
  const healthy = async (timeoutMs = 20_000) => {
    const running = nodes.filter((node) => node.child !== undefined);
    await pollUntil(
      async () => {
        const infos = await Promise.all(running.map((node) => cli(node.port, ["cluster", "info"])));
        return infos.every((info) => info.includes("cluster_state:ok"));
      },
      timeoutMs,
      "every cluster node reports cluster_state:ok",
    );
    // Replicas in sync, so that a killed primary has a replica ready to take over.
    await pollUntil(
      async () => {
        const infos = await Promise.all(
          running.map((node) => cli(node.port, ["info", "replication"])),
        );
        return infos.every((info) =>
          !info.includes("role:slave") || info.includes("master_link_status:up")
        );
      },
      timeoutMs,
      "every replica is in sync",
    );
  };
  const stopAll = async () => {
    await Promise.all(nodes.map((node) => killNode(node)));
  };
  const close = async () => {
    await stopAll();
    await Deno.remove(root, { recursive: true }).catch(() => {});
  };
  try {
    await startAll();
    await cli(nodes[0]!.port, [
      "--cluster",
      "create",
      ...nodes.map((node) => `127.0.0.1:${node.port}`),
      "--cluster-replicas",
      String(replicas),
      "--cluster-yes",
    ]);
    await healthy();
  } catch (error) {
    await close();
    throw error;
  }
  return {
    urls: nodes.map((node) => `${options.tls ? "rediss" : "redis"}://127.0.0.1:${node.port}`),
    nodeTimeoutMs,
    async primaryOf(key) {
      const running = nodes.find((node) => node.child !== undefined)!;
      const slot = Number((await cli(running.port, ["cluster", "keyslot", key])).trim());
      const shards = await cli(running.port, ["cluster", "slots"]);
      return primaryOfSlot(shards, slot);
    },
    kill: (port) => killNode(nodes.find((node) => node.port === port)!),
    stopAll,
    startAll,
    healthy,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/**
 * Reads `redis-cli cluster slots` (raw output: start, end, then per node ip, port, id[, hostname])
 * and returns the primary's port of the range holding `slot`.
 */
function primaryOfSlot(output: string, slot: number): number {
  const lines = output.trim().split("\n");
  for (let i = 0; i + 4 < lines.length; i++) {
    const from = Number(lines[i]);
    const to = Number(lines[i + 1]);
    if (/^\d+$/.test(lines[i]!) && /^\d+$/.test(lines[i + 1]!) && lines[i + 2] === "127.0.0.1") {
      if (slot >= from && slot <= to) return Number(lines[i + 3]);
    }
  }
  throw new Error(`no primary owns slot ${slot} in:\n${output}`);
}

/** A running Sentinel setup: a primary, one replica and three sentinels. */
export interface TestSentinel extends AsyncDisposable {
  /** The sentinels' URLs (`redis://127.0.0.1:<port>`, `rediss://` with TLS). */
  urls: string[];
  /** The primary group's name (`REDIS_SENTINEL_MASTER`). */
  name: string;
  /** `down-after-milliseconds` of the sentinels. */
  downAfterMs: number;
  /** The port of the current primary, as the sentinels see it. */
  primary(): Promise<number>;
  /** Kills the data node on `port` (SIGKILL). */
  kill(port: number): Promise<void>;
  /** Kills every process and removes the folders. */
  close(): Promise<void>;
}

/** Options of {@linkcode startSentinel}. */
export interface SentinelOptions {
  /** `down-after-milliseconds` (default 1000). */
  downAfterMs?: number;
  /** `requirepass` and `masterauth` of the data nodes and of the sentinels. */
  password?: string;
  /** TLS only, for the data nodes, the sentinels and replication (see {@linkcode makeTestTls}). */
  tls?: TestTls;
}

/** A sentinel's TLS-only configuration lines: it speaks TLS to clients and to the data nodes. */
function sentinelTlsLines(port: number, tls: TestTls | undefined): string[] {
  if (tls === undefined) return [`port ${port}`];
  return [
    "port 0",
    `tls-port ${port}`,
    `tls-cert-file ${tls.cert}`,
    `tls-key-file ${tls.key}`,
    `tls-ca-cert-file ${tls.ca}`,
    "tls-auth-clients no",
    "tls-replication yes",
  ];
}

/**
 * Starts a primary, a replica of it and three sentinels (quorum 2) on free loopback ports, and waits
 * until the replica is in sync and every sentinel knows the replica and the other sentinels.
 */
export async function startSentinel(options: SentinelOptions = {}): Promise<TestSentinel> {
  const downAfterMs = options.downAfterMs ?? 1000;
  const name = "limits";
  const root = await Deno.makeTempDir({ prefix: "redis-sentinel-" });
  const password = options.password;
  const auth = password === undefined ? [] : ["--requirepass", password, "--masterauth", password];
  const cliAuth = cliArgs(password, options.tls);
  const primaryPort = freePort();
  const data: Node[] = [primaryPort, freePort()].map((port, i) => ({
    port,
    child: undefined,
    args: [
      ...baseArgs(port, options.tls),
      ...auth,
      ...(i === 0 ? [] : ["--replicaof", "127.0.0.1", String(primaryPort)]),
    ],
  }));
  const sentinels: Node[] = [];
  for (let i = 0; i < 3; i++) {
    const port = freePort();
    const file = `${root}/sentinel-${port}.conf`;
    // A sentinel rewrites its configuration file: each its own, writable.
    await Deno.writeTextFile(
      file,
      [
        ...sentinelTlsLines(port, options.tls),
        "bind 127.0.0.1",
        `sentinel monitor ${name} 127.0.0.1 ${primaryPort} 2`,
        `sentinel down-after-milliseconds ${name} ${downAfterMs}`,
        `sentinel failover-timeout ${name} ${Math.max(3000, 3 * downAfterMs)}`,
        `sentinel parallel-syncs ${name} 1`,
        ...(password === undefined
          ? []
          // Quoted: a password may hold spaces (the configuration file splits on them).
          : [
            `sentinel auth-pass ${name} ${JSON.stringify(password)}`,
            `requirepass ${JSON.stringify(password)}`,
          ]),
        "",
      ].join("\n"),
    );
    sentinels.push({ port, child: undefined, args: [file, "--sentinel"] });
  }
  const all = [...data, ...sentinels];
  const close = async () => {
    await Promise.all(all.map((node) => killNode(node)));
    await Deno.remove(root, { recursive: true }).catch(() => {});
  };
  const cli = (port: number, args: string[]) => redisCli(["-p", String(port), ...cliAuth, ...args]);
  try {
    for (const node of data) spawnNode(node, root);
    await Promise.all(data.map((node) => waitForPort(node.port, 5000)));
    await pollUntil(
      async () =>
        (await cli(data[1]!.port, ["info", "replication"])).includes("master_link_status:up"),
      10_000,
      "the replica is in sync",
    );
    // Started after the replica is in sync, the sentinels' first look at the primary lists it
    // (otherwise they find it on their next look, 10 s later).
    for (const node of sentinels) spawnNode(node, root);
    await Promise.all(sentinels.map((node) => waitForPort(node.port, 5000)));
    await pollUntil(
      async () => {
        const views = await Promise.all(
          sentinels.map((s) => cli(s.port, ["sentinel", "master", name])),
        );
        return views.every((view) =>
          /num-slaves\n1\n/.test(view) && /num-other-sentinels\n2\n/.test(view)
        );
      },
      15_000,
      "every sentinel knows the replica and the other sentinels",
    );
  } catch (error) {
    await close();
    throw error;
  }
  return {
    urls: sentinels.map((s) => `${options.tls ? "rediss" : "redis"}://127.0.0.1:${s.port}`),
    name,
    downAfterMs,
    async primary() {
      const reply = await cli(sentinels[0]!.port, ["sentinel", "get-master-addr-by-name", name]);
      return Number(reply.trim().split("\n")[1]);
    },
    kill: (port) => killNode(data.find((node) => node.port === port)!),
    close,
    [Symbol.asyncDispose]: close,
  };
}
