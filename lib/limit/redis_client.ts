/**
 * The connection of the Redis store and hit log to any Redis topology a team runs: one server
 * (`single`), a Redis/Valkey Cluster (`cluster`: `createCluster`, which follows `MOVED` and `ASK`
 * and refreshes its map of slots when a primary fails over) or a primary found through Sentinel
 * (`sentinel`: `createSentinel`, which follows the sentinels' `switch-master`). Routing, failover and
 * the `NOSCRIPT` fallback are `@redis/client`'s; this module picks the client, gives every node the
 * same credentials and TLS, keeps connecting when the store is down at start-up, and turns the
 * replies of a wrong `REDIS_TYPE` into one sentence naming the type to set.
 *
 * @module
 */

import { createClient, createCluster, createSentinel } from "@redis/client";
import slotModule from "@redis/client/dist/lib/utils/calculate-slot.js";
import type { RateLimitPolicy } from "./decision.ts";
import { SCRIPTS } from "./redis_scripts.ts";

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

/** The longest wait between two connection attempts, in ms, so limiting resumes soon after an outage. */
const RECONNECT_MAX_MS = 500;

/**
 * A cluster node's longest wait between two connection attempts, in ms. Each attempt at a node that
 * stopped answering is also when the client may re-read the slots: a quarter of a second keeps the
 * time from a replica's promotion to limiting again within about 0.5 s (with the guard's probe).
 */
const CLUSTER_RECONNECT_MAX_MS = 250;

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
  /** Disconnects. */
  close(): Promise<void>;
}

/** Options of {@linkcode createRedisClient}. */
export interface RedisClientOptions {
  /** Receives the client's connection errors (it reconnects by itself). */
  onError?: (error: Error) => void;
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

/** One client of any topology behind {@linkcode RedisStoreClient}. */
class Connection implements RedisStoreClient {
  readonly type: RedisType;
  readonly #client: ScriptClient;
  readonly #cluster: ReturnType<typeof clusterClient> | undefined;
  readonly #onError: (error: Error) => void;
  readonly #connected: Promise<void>;
  #problem: string | undefined;
  #closed = false;
  #retry: ReturnType<typeof setTimeout> | undefined;
  #wake: (() => void) | undefined;

  constructor(target: RedisTarget, options: RedisClientOptions) {
    this.type = target.type;
    this.#onError = (error) => {
      if (target.type === "cluster" && /cluster support disabled/i.test(error.message)) {
        this.#problem = CLUSTER_AT_SINGLE;
      }
      options.onError?.(error);
    };
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
    if (target.type === "cluster") emitter.on("node-error", this.#onError);
    this.#connected = this.#connect();
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
    return this.#checked(() => this.#client.rateLimitHit(key, now, policy, member));
  }

  peek(key: string, windowMs: number, now?: number): Promise<unknown> {
    return this.#checked(() => this.#client.rateLimitPeek(key, windowMs, now));
  }

  async time(key: string): Promise<number> {
    const reply = await this.#checked(() => this.#client.rateLimitTime(key));
    const ms = Number(reply);
    if (!Number.isFinite(ms)) throw new TypeError(`unexpected reply from Redis TIME: ${reply}`);
    return ms;
  }

  exchange(keys: [string, string], args: string[]): Promise<unknown> {
    return this.#checked(() => this.#client.rateLimitExchange(keys, args));
  }

  slotOf(key: string): number | undefined {
    return this.type === "cluster" ? calculateSlot(key) : undefined;
  }

  primaryOf(slot: number): string | undefined {
    return this.#cluster?.slots[slot]?.master.address;
  }

  async ready(waitMs: number): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const waited = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, waitMs);
    });
    await Promise.race([this.#connected, waited]);
    clearTimeout(timer);
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

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#retry);
    this.#wake?.();
    // Closing waits for the replies in flight; a client that is not connected has none to wait for.
    if (this.#client.isReady) await this.#client.close().catch(() => this.#client.destroy());
    else this.#client.destroy();
    await this.#connected;
  }

  /** Runs `call`, refusing at once once a wrong type is known and naming it on a `MOVED` reply. */
  async #checked(call: () => Promise<unknown>): Promise<unknown> {
    if (this.#problem !== undefined) throw new RedisTypeError(this.#problem);
    try {
      return await call();
    } catch (error) {
      // A cluster client follows MOVED itself; a single-server client is at a cluster node.
      if (this.type === "single" && error instanceof Error && error.message.startsWith("MOVED ")) {
        this.#problem = SINGLE_AT_CLUSTER;
        throw new RedisTypeError(SINGLE_AT_CLUSTER);
      }
      throw error;
    }
  }

  /**
   * Connects, and for a cluster or Sentinel keeps trying every half second until it succeeds (their
   * clients give up after a first failed discovery; a single-server client retries by itself).
   */
  async #connect(): Promise<void> {
    while (!this.#closed) {
      try {
        await this.#client.connect();
        return;
      } catch (error) {
        this.#onError(error instanceof Error ? error : new Error(String(error)));
        if (this.type === "single" || this.#problem !== undefined) return;
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
 * wrong, so that start-up says which type to set.
 */
export async function openRedisStoreClient(
  target: RedisTarget | string,
  options: RedisClientOptions & { connectWaitMs?: number } = {},
): Promise<RedisStoreClient> {
  const client = createRedisClient(target, options);
  await client.ready(options.connectWaitMs ?? 2000);
  const problem = await client.typeProblem();
  if (problem !== undefined) {
    await client.close();
    throw new RedisTypeError(problem);
  }
  return client;
}
