/**
 * A rate-limit store over Redis, for several processes or machines sharing one limit.
 *
 * Each caller's log is a sorted set of its counted requests, scored by time. One Lua script drops what
 * left the window, counts, and adds the request when it is admitted, so a decision is one atomic round
 * trip (`EVALSHA`, falling back to `EVAL` once when the server does not know the script yet). Every
 * admission resets the key's expiry to the window, so idle callers vanish on their own.
 *
 * Which clock decides: the service's. The request's time is passed to the script rather than read
 * with Redis `TIME`, so that every store (memory, Deno KV, which has no server clock, and Redis) has
 * the same semantics, the headers are computed against the clock that stamped the log, and tests can
 * inject a clock. The cost: instances must keep their clocks in sync (NTP); an instance whose clock
 * is `d` ms off sees the window `d` ms shorter or longer for requests counted by the others.
 *
 * @module
 */

import { peekDecision } from "./decision.ts";
import { decide, type Decision, type RateLimitPolicy, type RateLimitStore } from "./decision.ts";
import {
  logKey,
  openRedisStoreClient,
  type RedisClientOptions,
  type RedisStoreClient,
  type RedisTarget,
} from "./redis_client.ts";

/** Options of {@linkcode RedisStore}. */
export interface RedisStoreOptions {
  /** Key prefix of the logs (default `"rate_limit:"`). */
  prefix?: string;
  /** Close the client with the store (default false: whoever connected it closes it). */
  ownsClient?: boolean;
}

/** Counters of a {@linkcode RedisStore}, for tests, operators and the benchmark. */
export interface RedisStoreStats {
  /** Script calls sent (one per decision; a NOSCRIPT fallback adds one that is not counted here). */
  roundTrips: number;
}

/**
 * The Redis store.
 *
 * @example
 * ```ts ignore
 * // Not run by `deno test --doc`: it needs a Redis server (tests/limit/store_contract_test.ts starts one).
 * import assert from "node:assert/strict";
 * const store = await openRedisStore("redis://127.0.0.1:6379", { limit: 60, windowMs: 60_000 });
 * const decision = await store.hit("192.0.2.1", Date.now());
 * assert.deepEqual(decision, { allowed: true, remaining: 59, resetSeconds: 60 });
 * await store.close();
 * ```
 */
export class RedisStore implements RateLimitStore {
  readonly #client: RedisStoreClient;
  readonly #policy: RateLimitPolicy;
  readonly #prefix: string;
  readonly #ownsClient: boolean;
  // Members must be unique per request: two requests in the same millisecond are two entries.
  readonly #instance = crypto.randomUUID().slice(0, 8);
  #sequence = 0;
  #roundTrips = 0;

  /** Creates a store for `policy` over a client built by `createRedisClient` (`redis_client.ts`). */
  constructor(client: RedisStoreClient, policy: RateLimitPolicy, options: RedisStoreOptions = {}) {
    this.#client = client;
    this.#policy = policy;
    this.#prefix = options.prefix ?? "rate_limit:";
    this.#ownsClient = options.ownsClient ?? false;
  }

  /** {@inheritDoc RateLimitStore.hit} */
  async hit(key: string, now: number): Promise<Decision> {
    this.#roundTrips++;
    const member = `${now}:${this.#instance}:${(this.#sequence++).toString(36)}`;
    const [admitted, count, oldest] = parseReply(
      await this.#client.hit(
        logKey(this.#client.type, this.#prefix, key),
        now,
        this.#policy,
        member,
      ),
    );
    // The script admits exactly when `decide` does (count < limit); `decide` shapes the answer. An
    // admitted request may be older than the log's oldest when clocks differ a little.
    const first = admitted && oldest !== undefined ? Math.min(oldest, now) : oldest;
    return decide(count, first, now, this.#policy);
  }

  /** {@inheritDoc RateLimitStore.peek} */
  async peek(key: string, now: number): Promise<Decision> {
    this.#roundTrips++;
    const [, count, oldest] = parseReply(
      await this.#client.peek(
        logKey(this.#client.type, this.#prefix, key),
        now - this.#policy.windowMs,
      ),
    );
    return peekDecision(count, oldest, now, this.#policy);
  }

  /** The counters since the store was created. */
  stats(): RedisStoreStats {
    return { roundTrips: this.#roundTrips };
  }

  /** {@inheritDoc RateLimitStore.close} */
  async close(): Promise<void> {
    if (this.#ownsClient) await this.#client.close();
  }
}

/**
 * Reads a script's reply: `{admitted, count, oldest}` from the hit script, `{count, oldest}` from the
 * peek script (the first flag is then absent and read as false). `oldest` is a score string, or ""
 * when the log is empty.
 */
function parseReply(
  reply: unknown,
): [admitted: boolean, count: number, oldest: number | undefined] {
  if (!Array.isArray(reply) || (reply.length !== 2 && reply.length !== 3)) {
    throw new TypeError(`unexpected reply from the rate-limit script: ${JSON.stringify(reply)}`);
  }
  const [flag, count, oldest] = reply.length === 3 ? reply : [0, ...reply];
  return [Number(flag) === 1, Number(count), oldest === "" ? undefined : Number(oldest)];
}

/**
 * Connects to `target` (a `redis://` URL is one server) and builds a store that closes the client
 * with itself. Waits for the first connection at most `connectWaitMs` (default 2000) and returns
 * either way; rejects with a `RedisTypeError` when the server shows that the type is wrong.
 */
export async function openRedisStore(
  target: RedisTarget | string,
  policy: RateLimitPolicy,
  options: RedisStoreOptions & RedisClientOptions & { connectWaitMs?: number } = {},
): Promise<RedisStore> {
  const client = await openRedisStoreClient(target, options);
  return new RedisStore(client, policy, { ...options, ownsClient: true });
}
