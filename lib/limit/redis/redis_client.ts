/**
 * The connection of the Redis store and hit log to any Redis topology a team runs: one server
 * (`single`), a Redis/Valkey Cluster (`cluster`: `createCluster`, which follows `MOVED` and `ASK`
 * and refreshes its map of slots when a primary fails over) or a primary found through Sentinel
 * (`sentinel`: `createSentinel`, which follows the sentinels' `switch-master`). Routing, failover and
 * the `NOSCRIPT` fallback are `@redis/client`'s; this module picks the client, gives every node the
 * same credentials and TLS, keeps connecting when the store is down at start-up, turns the replies
 * of a wrong `REDIS_TYPE` into one sentence naming the type to set, and replaces a connection that
 * died silently ({@linkcode SILENT_CONNECTION_MS}).
 *
 * @module
 */

import { createClient, createCluster, createSentinel, ErrorReply } from "@redis/client";
import slotModule from "@redis/client/dist/lib/utils/calculate-slot.js";
import type { RateLimitPolicy } from "../core/decision.ts";
import { SCRIPTS } from "./redis_scripts.ts";
import { raceTimer, unref } from "../../timer.ts";

/** How Redis is deployed: one server, a cluster, or a primary and replicas watched by Sentinel. */
export type RedisType = "single" | "cluster" | "sentinel";

/** Where Redis is: `REDIS_TYPE`, `REDIS_URL` and `REDIS_SENTINEL_MASTER`. */
export interface RedisTarget {
  /** The topology. */
  type: RedisType;
  /** One URL for `single`; the seed nodes of `cluster`; the sentinels of `sentinel`. */
  urls: readonly string[];
  /** The primary's group name that the sentinels watch; required with `sentinel`. */
  sentinelMaster?: string | undefined;
}

/** Raised when the server's replies show that `REDIS_TYPE` names another topology. */
export class RedisTypeError extends Error {
  /** Creates the error with the sentence to show the operator. */
  constructor(message: string) {
    super(message);
    this.name = "RedisTypeError";
  }
}

/** The sentence for `single` pointed at a cluster node. */
export const SINGLE_AT_CLUSTER =
  "REDIS_URL points at a Redis Cluster node (it answers MOVED or reports cluster mode): set REDIS_TYPE=cluster";

/** The sentence for `cluster` pointed at a server without cluster mode. */
export const CLUSTER_AT_SINGLE =
  "REDIS_URL points at a Redis server without cluster mode (cluster support disabled): set REDIS_TYPE=single";

/** The sentence for `single` pointed at a sentinel. */
export const SINGLE_AT_SENTINEL =
  "REDIS_URL points at a Redis Sentinel, not a data node: set REDIS_TYPE=sentinel and REDIS_SENTINEL_MASTER";

/** Raised when Redis refuses `REDIS_URL`'s credentials: the operator's mistake, not an outage. */
export class RedisAuthError extends Error {
  /** Creates the error with the sentence to show the operator. */
  constructor(message: string) {
    super(message);
    this.name = "RedisAuthError";
  }
}

/**
 * The sentence for a reply refusing the connection's credentials, or undefined for any other error.
 * Redis answers `WRONGPASS` to a wrong password or user (ACL), `NOAUTH` when one is needed and none
 * was given, and `ERR AUTH ... without any password configured` to a password it does not expect.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.match(
 *   credentialsProblem(new Error("WRONGPASS invalid username-password pair or user is disabled."))!,
 *   /^Redis refused the user name or password in REDIS_URL \(WRONGPASS\)/,
 * );
 * assert.equal(credentialsProblem(new Error("connect ECONNREFUSED 127.0.0.1:6379")), undefined);
 * ```
 */
export function credentialsProblem(error: Error): string | undefined {
  const message = String(error?.message ?? error);
  if (message.startsWith("WRONGPASS")) {
    return "Redis refused the user name or password in REDIS_URL (WRONGPASS): set the right ones there, percent-encoded (redis://user:password@host:6379, or redis://:password@host:6379 for the default user)";
  }
  if (message.startsWith("NOAUTH")) {
    return "Redis requires a password and REDIS_URL gives none (NOAUTH): add it, percent-encoded (redis://:password@host:6379, or redis://user:password@host:6379 for an ACL user)";
  }
  if (/^ERR AUTH\b.*without any password configured/.test(message)) {
    return "REDIS_URL gives a password but this Redis has none for the default user: remove it from REDIS_URL, or name the ACL user it belongs to (redis://user:password@host:6379)";
  }
  return undefined;
}

/** The longest wait between two connection attempts, in ms, so limiting resumes soon after an outage. */
const RECONNECT_MAX_MS = 500;

/**
 * A cluster node's longest wait between two connection attempts, in ms. Each attempt at a node that
 * stopped answering is also when the client may re-read the slots: a quarter of a second keeps the
 * time from a replica's promotion to limiting again within about 0.5 s (with the guard's probe).
 */
const CLUSTER_RECONNECT_MAX_MS = 250;

/**
 * The shortest silence after which a connection is presumed dead, in ms: a call has waited this
 * long and nothing at all has come back on its connection (on a cluster, from the primary serving
 * its slot) since it was sent. Such a connection died without a FIN or RST (a NAT or firewall entry
 * dropped, a VM paused, a cable pulled): the kernel would retransmit into it for about 15 minutes
 * with Linux's defaults before giving up, and `@redis/client` would send every later call down it
 * meanwhile (its `socketTimeout` counts writes as activity, so it never fires while calls are sent;
 * TCP keepalive probes only an idle connection; Deno offers no `TCP_USER_TIMEOUT`). The client is
 * then replaced by a new one, which connects afresh, and the calls left waiting are rejected. The
 * bound is the store timeout where that is longer (`storeTimeoutMs`), so that no call a caller still
 * waits for is cut. The silence is checked every 250 ms: a dead connection is replaced at most
 * `max(SILENT_CONNECTION_MS, RATE_LIMIT_STORE_TIMEOUT_MS) + 0.5 s` after the first call it left
 * unanswered. A connection with no call waiting is never judged, so an idle one costs
 * nothing and never flaps. Redis answers a healthy connection in microseconds to milliseconds: 3 s
 * of silence with a call waiting is a dead connection, or a server stalled for everyone (then a new
 * connection waits as the old one did, and the guard answers by policy meanwhile).
 */
export const SILENT_CONNECTION_MS = 3000;

/** How often the connections' silence is checked, in ms: dead ones are replaced within a tick. */
const SILENCE_TICK_MS = 250;

/**
 * The hash slot of a key, by the very function the cluster client routes with (a CommonJS module:
 * its default export arrives as `default` of what is imported).
 */
const calculateSlot = ((slotModule as unknown as { default?: unknown }).default ??
  slotModule) as (key: string) => number;

/**
 * How many hash tags a cluster's logs (`exact`) are spread over. A caller's log is one key whatever
 * the topology; on a cluster it carries one of these tags, picked by the caller, and the tags' slots,
 * evenly spaced, spread the logs over up to this many primaries.
 */
export const CLUSTER_KEY_TAGS = 16;

/** One tag per equal share of the 16,384 slots: the first `t<i>-<n>` whose slot falls in share i. */
const TAGS = Array.from({ length: CLUSTER_KEY_TAGS }, (_, i) => {
  const share = 16384 / CLUSTER_KEY_TAGS;
  for (let n = 0;; n++) {
    const tag = `t${i}-${n}`;
    if (Math.floor(calculateSlot(tag) / share) === i) return tag;
  }
});

/**
 * The key of `caller`'s log: `prefix + caller`, and on a cluster with the caller's hash tag first.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(logKey("single", "rate_limit:", "192.0.2.1"), "rate_limit:192.0.2.1");
 * assert.match(logKey("cluster", "rate_limit:", "192.0.2.1"), /^rate_limit:\{t\d+-\d+\}192\.0\.2\.1$/);
 * ```
 */
export function logKey(type: RedisType, prefix: string, caller: string): string {
  if (type !== "cluster") return prefix + caller;
  return `${prefix}{${TAGS[calculateSlot(caller) % CLUSTER_KEY_TAGS]}}${caller}`;
}

/** What the store and the hit log send, whatever the topology. */
export interface RedisStoreClient {
  /** The topology this client speaks to. */
  readonly type: RedisType;
  /** Whether the client is connected (to at least the nodes it routed to last). */
  readonly isReady: boolean;
  /**
   * Runs the hit script on one caller's log, by the server's clock (by `now` where a test passes one:
   * `RedisStore`'s `callerClock`).
   */
  hit(
    key: string,
    now: number | undefined,
    policy: RateLimitPolicy,
    member: string,
  ): Promise<unknown>;
  /** Runs the peek script on one caller's log, over the window ending at the server's now (or `now`). */
  peek(key: string, windowMs: number, now?: number): Promise<unknown>;
  /** Reads the clock of the primary serving `key`, in ms since the epoch. */
  time(key: string): Promise<number>;
  /** Runs the hit log's exchange script on its two keys, which share one hash slot. */
  exchange(keys: [string, string], args: string[]): Promise<unknown>;
  /** The hash slot of `key` on a cluster; undefined elsewhere (every key on one primary). */
  slotOf(key: string): number | undefined;
  /** The address of the primary serving `slot` as the client last saw it (cluster only). */
  primaryOf(slot: number): string | undefined;
  /** Resolves when the client is first ready, or `waitMs` later either way. */
  ready(waitMs: number): Promise<void>;
  /** A wrong `REDIS_TYPE` seen so far, as the sentence to show; undefined otherwise. */
  typeProblem(): Promise<string | undefined>;
  /**
   * While not connected: the credentials the server refused at the last attempt, as the sentence
   * to show; undefined otherwise.
   */
  credentialsProblem(): string | undefined;
  /** Disconnects. */
  close(): Promise<void>;
}

/** Options of {@linkcode createRedisClient}. */
export interface RedisClientOptions {
  /** Receives the client's connection errors (it reconnects by itself). */
  onError?: (error: Error) => void;
  /**
   * The longest a caller waits for a call, in ms (`RATE_LIMIT_STORE_TIMEOUT_MS`): a connection is
   * presumed dead after `max(storeTimeoutMs, SILENT_CONNECTION_MS)` of silence with a call waiting.
   */
  storeTimeoutMs?: number;
  /**
   * Told when the server starts refusing the connection's credentials (the sentence of
   * {@linkcode credentialsProblem}) and when it accepts them again (undefined): once per change,
   * not once per reconnection attempt. {@linkcode openRedisStoreClient} tells only the changes
   * after its start-up check, which ends start-up on a refusal itself.
   */
  onCredentials?: (refused: string | undefined) => void;
}

/** What every client of the three kinds offers that this module uses. */
interface ScriptClient {
  rateLimitHit(
    key: string,
    now: number | undefined,
    policy: RateLimitPolicy,
    member: string,
  ): Promise<unknown>;
  rateLimitPeek(key: string, windowMs: number, now: number | undefined): Promise<unknown>;
  rateLimitTime(key: string): Promise<unknown>;
  rateLimitExchange(keys: [string, string], args: string[]): Promise<unknown>;
  readonly isReady: boolean;
  readonly isOpen: boolean;
  connect(): Promise<unknown>;
  close(): Promise<void>;
  destroy(): unknown;
}

/** The parts of a `redis://` or `rediss://` URL every node of a topology is reached with. */
function nodeOf(url: string) {
  const parsed = new URL(url);
  const tls = parsed.protocol === "rediss:";
  return {
    host: parsed.hostname.replace(/^\[(.*)\]$/, "$1"),
    port: Number(parsed.port || 6379),
    tls,
    ...(parsed.username ? { username: decodeURIComponent(parsed.username) } : {}),
    ...(parsed.password ? { password: decodeURIComponent(parsed.password) } : {}),
  };
}

/** The socket settings of every connection: fail fast while down, reconnect at most `maxMs` apart. */
function socketOptions(tls: boolean, maxMs: number) {
  return {
    connectTimeout: 2000,
    reconnectStrategy: (retries: number) => Math.min(50 * (retries + 1), maxMs),
    ...(tls ? { tls: true as const } : {}),
  };
}

/** Credentials, TLS and the offline behaviour shared by every node client of a topology. */
function nodeDefaults(url: string, reconnectMaxMs = RECONNECT_MAX_MS) {
  const { tls, username, password } = nodeOf(url);
  return {
    ...(username === undefined ? {} : { username }),
    ...(password === undefined ? {} : { password }),
    // Fail fast while disconnected instead of queueing: the guard answers by policy meanwhile.
    disableOfflineQueue: true,
    socket: socketOptions(tls, reconnectMaxMs),
  };
}

function singleClient(url: string) {
  return createClient({ url, scripts: SCRIPTS, ...nodeDefaults(url) }) as unknown as ScriptClient;
}

function clusterClient(urls: readonly string[]) {
  return createCluster({
    rootNodes: urls.map((url) => ({ socket: { host: nodeOf(url).host, port: nodeOf(url).port } })),
    defaults: nodeDefaults(urls[0]!, CLUSTER_RECONNECT_MAX_MS),
    scripts: SCRIPTS,
    // Re-read the slots at each attempt to reach a node that stopped answering (at most every
    // quarter second): its replica may own them by then.
    topologyRefreshOnReconnectionAttemptStrategy: CLUSTER_RECONNECT_MAX_MS,
  });
}

function sentinelClient(urls: readonly string[], name: string) {
  const defaults = nodeDefaults(urls[0]!);
  return createSentinel({
    name,
    sentinelRootNodes: urls.map((url) => ({ host: nodeOf(url).host, port: nodeOf(url).port })),
    nodeClientOptions: defaults,
    sentinelClientOptions: defaults,
    scripts: SCRIPTS,
    // While the primary is down, fail the call at once instead of re-reading the sentinels after a
    // fixed 1 s pause (6.3's default retries 16 times, 1 s apart): the guard answers by policy and
    // probes every 0.25 s, and the sentinels' `+switch-master` makes the client read them at once.
    maxCommandRediscovers: 0,
  });
}

/**
 * Builds a client for `target` with the store's scripts, and starts connecting without waiting: a
 * Redis that is down at start-up is an outage like any other, and the client keeps trying.
 */
export function createRedisClient(
  target: RedisTarget | string,
  options: RedisClientOptions = {},
): RedisStoreClient {
  const resolved = typeof target === "string"
    ? { type: "single" as const, urls: [target] }
    : target;
  return new Connection(resolved, options);
}

/** The calls waiting on one connection (a cluster: one slot), and whether anything came back. */
interface Lane {
  /** Calls sent and not settled. */
  waiting: number;
  /** Replies received (an error reply is one: the server answered). */
  replies: number;
  /** `replies` when the silence check last looked. */
  seen: number;
  /**
   * Since when nothing came back while a call waited, by `performance.now()`; undefined while no
   * call waits, and until the check first looks.
   */
  quietSince: number | undefined;
}

/** One client of any topology behind {@linkcode RedisStoreClient}. */
class Connection implements RedisStoreClient {
  readonly type: RedisType;
  readonly #target: RedisTarget;
  #client!: ScriptClient;
  #cluster: ReturnType<typeof clusterClient> | undefined;
  readonly #onError: (error: Error) => void;
  /** Forgets a refusal once connected (and tells `onCredentials` so). */
  readonly #onAccepted: () => void;
  #connected!: Promise<void>;
  #problem: string | undefined;
  /** The credentials the server refused at the last connection attempt, as a sentence. */
  #refused: string | undefined;
  #closed = false;
  #retry: ReturnType<typeof setTimeout> | undefined;
  #wake: (() => void) | undefined;
  readonly #silentMs: number;
  /** One lane per slot a call was sent to (slot 0 off a cluster: one connection). */
  readonly #lanes = new Map<number, Lane>();
  readonly #ticker: ReturnType<typeof setInterval>;

  constructor(target: RedisTarget, options: RedisClientOptions) {
    this.type = target.type;
    this.#target = target;
    this.#silentMs = Math.max(options.storeTimeoutMs ?? 0, SILENT_CONNECTION_MS);
    this.#onAccepted = () => {
      if (this.#refused === undefined) return;
      this.#refused = undefined;
      options.onCredentials?.(undefined);
    };
    this.#onError = (error) => {
      if (target.type === "cluster" && /cluster support disabled/i.test(error.message)) {
        this.#problem = CLUSTER_AT_SINGLE;
      }
      const refused = credentialsProblem(error);
      if (refused !== undefined && this.#refused === undefined) options.onCredentials?.(refused);
      this.#refused = refused ?? this.#refused;
      options.onError?.(error);
    };
    this.#open();
    this.#ticker = setInterval(() => this.#checkSilence(), SILENCE_TICK_MS);
    // The check must never keep a process (or a test) alive.
    unref(this.#ticker);
  }

  /** Builds the client of the target's type and starts connecting it. */
  #open(): void {
    const target = this.#target;
    this.#cluster = undefined;
    if (target.type === "cluster") {
      this.#cluster = clusterClient(target.urls);
      this.#client = this.#cluster as unknown as ScriptClient;
    } else if (target.type === "sentinel") {
      this.#client = sentinelClient(
        target.urls,
        target.sentinelMaster ?? "",
      ) as unknown as ScriptClient;
    } else {
      this.#client = singleClient(target.urls[0]!);
    }
    // An unhandled "error" event would end the process; the guard reports outages once per incident.
    const emitter = this.#client as unknown as { on(event: string, f: (e: Error) => void): void };
    emitter.on("error", this.#onError);
    emitter.on("ready", this.#onAccepted);
    if (target.type === "cluster") {
      emitter.on("node-error", this.#onError);
      // A cluster emits no "ready" of its own after a node reconnects: its nodes' tell.
      emitter.on("node-ready", this.#onAccepted);
    }
    this.#connected = this.#connect(this.#client);
  }

  get isReady(): boolean {
    return this.#client.isReady;
  }

  hit(
    key: string,
    now: number | undefined,
    policy: RateLimitPolicy,
    member: string,
  ): Promise<unknown> {
    return this.#checked(key, () => this.#client.rateLimitHit(key, now, policy, member));
  }

  peek(key: string, windowMs: number, now?: number): Promise<unknown> {
    return this.#checked(key, () => this.#client.rateLimitPeek(key, windowMs, now));
  }

  async time(key: string): Promise<number> {
    const reply = await this.#checked(key, () => this.#client.rateLimitTime(key));
    const ms = Number(reply);
    if (!Number.isFinite(ms)) throw new TypeError(`unexpected reply from Redis TIME: ${reply}`);
    return ms;
  }

  exchange(keys: [string, string], args: string[]): Promise<unknown> {
    return this.#checked(keys[0], () => this.#client.rateLimitExchange(keys, args));
  }

  slotOf(key: string): number | undefined {
    return this.type === "cluster" ? calculateSlot(key) : undefined;
  }

  primaryOf(slot: number): string | undefined {
    return this.#cluster?.slots[slot]?.master.address;
  }

  async ready(waitMs: number): Promise<void> {
    await raceTimer(this.#connected, waitMs, () => ({ answer: undefined }));
  }

  async typeProblem(): Promise<string | undefined> {
    if (this.#problem !== undefined || this.type !== "single" || !this.#client.isReady) {
      return this.#problem;
    }
    // `INFO server` names the mode; a managed service that refuses INFO is taken at its word.
    const info = await (this.#client as unknown as { info(section: string): Promise<string> })
      .info("server").catch(() => "");
    const mode = /redis_mode:(\w+)/.exec(info)?.[1];
    if (mode === "cluster") this.#problem = SINGLE_AT_CLUSTER;
    if (mode === "sentinel") this.#problem = SINGLE_AT_SENTINEL;
    return this.#problem;
  }

  credentialsProblem(): string | undefined {
    if (this.#refused === undefined) return undefined;
    try {
      return this.#client.isReady ? undefined : this.#refused;
    } catch {
      // A Sentinel client that never reached its primary has no `isReady` to read.
      return this.#refused;
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#retry);
    this.#wake?.();
    // Closing waits for the replies in flight (the silence check destroys a client whose
    // connection went silent meanwhile); a client that is not connected has none to wait for.
    const client = this.#client;
    if (client.isReady) await client.close().catch(() => client.destroy());
    else client.destroy();
    clearInterval(this.#ticker);
    await this.#connected;
  }

  /**
   * Runs `call` on `key`'s connection, refusing at once once a wrong type is known, naming it on a
   * `MOVED` reply, and counting what comes back for the silence check.
   */
  async #checked(key: string, call: () => Promise<unknown>): Promise<unknown> {
    if (this.#problem !== undefined) throw new RedisTypeError(this.#problem);
    const slot = this.type === "cluster" ? calculateSlot(key) : 0;
    let lane = this.#lanes.get(slot);
    if (lane === undefined) {
      lane = { waiting: 0, replies: 0, seen: 0, quietSince: undefined };
      this.#lanes.set(slot, lane);
    }
    lane.waiting++;
    try {
      const reply = await call();
      lane.replies++;
      return reply;
    } catch (error) {
      if (error instanceof ErrorReply) lane.replies++;
      // A cluster client follows MOVED itself; a single-server client is at a cluster node.
      if (this.type === "single" && error instanceof Error && error.message.startsWith("MOVED ")) {
        this.#problem = SINGLE_AT_CLUSTER;
        throw new RedisTypeError(SINGLE_AT_CLUSTER);
      }
      // Offline because the server refused the credentials: say so, not "The client is offline".
      const refused = this.credentialsProblem();
      if (refused !== undefined) throw new RedisAuthError(refused);
      throw error;
    } finally {
      // Silence counts only while a call waits (written calls never time out in the client).
      if (--lane.waiting === 0) lane.quietSince = undefined;
    }
  }

  /**
   * Every {@linkcode SILENCE_TICK_MS}: a lane with a call waiting and nothing back for `silentMs`
   * is a connection that died silently, and the client is replaced (destroyed, once closing).
   */
  #checkSilence(): void {
    const now = performance.now();
    let dead = false;
    for (const lane of this.#lanes.values()) {
      if (lane.waiting === 0) continue;
      if (lane.replies !== lane.seen || lane.quietSince === undefined) {
        lane.seen = lane.replies;
        lane.quietSince = now;
      } else if (now - lane.quietSince >= this.#silentMs) {
        dead = true;
      }
    }
    if (!dead) return;
    // The calls waiting are rejected below, each on its own lane; new ones start from silence 0.
    for (const lane of this.#lanes.values()) lane.quietSince = undefined;
    const old = this.#client;
    this.#onError(
      new Error(
        `no reply from Redis for ${this.#silentMs} ms with a call waiting: ` +
          (this.#closed ? "closing the connection" : "connecting again"),
      ),
    );
    if (!this.#closed) this.#open();
    // Rejects the calls still waiting on the dead connection (and ends a close waiting for them).
    try {
      old.destroy();
    } catch {
      // Already destroyed.
    }
  }

  /**
   * Connects `client`, and for a cluster or Sentinel keeps trying every half second until it
   * succeeds (their clients give up after a first failed discovery; a single-server client retries
   * by itself), while it is still this connection's client.
   */
  async #connect(client: ScriptClient): Promise<void> {
    while (!this.#closed && this.#client === client) {
      try {
        await client.connect();
        return;
      } catch (error) {
        if (this.#client !== client) return;
        this.#onError(error instanceof Error ? error : new Error(String(error)));
        if (this.type === "single" || this.#problem !== undefined) return;
        if (this.#refused !== undefined) return;
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
          this.#retry = setTimeout(resolve, RECONNECT_MAX_MS);
        });
      }
    }
  }
}

/**
 * Connects to `target` and returns the client once it is ready, or after `connectWaitMs` (default
 * 2000) either way: a Redis that is down at start-up is an outage like any other. Rejects with a
 * {@linkcode RedisTypeError} (and closes the client) when the server shows that `REDIS_TYPE` is
 * wrong, so that start-up says which type to set, and with a {@linkcode RedisAuthError} when it
 * refused the credentials.
 */
export async function openRedisStoreClient(
  target: RedisTarget | string,
  options: RedisClientOptions & { connectWaitMs?: number } = {},
): Promise<RedisStoreClient> {
  // Start-up names a refusal itself (below); `onCredentials` hears of the changes after it.
  let started = false;
  let told = false;
  const { onCredentials } = options;
  const client = createRedisClient(target, {
    ...options,
    onCredentials: (refused) => {
      if (!started || !onCredentials || told === (refused !== undefined)) return;
      told = refused !== undefined;
      onCredentials(refused);
    },
  });
  await client.ready(options.connectWaitMs ?? 2000);
  const problem = await client.typeProblem();
  if (problem !== undefined) {
    await client.close();
    throw new RedisTypeError(problem);
  }
  // Refused credentials do not pass like an outage: start-up ends naming them.
  const refused = client.credentialsProblem();
  if (refused !== undefined) {
    await client.close();
    throw new RedisAuthError(refused);
  }
  started = true;
  return client;
}
