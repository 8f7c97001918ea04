/**
 * A rate-limit store over Redis, for several processes or machines sharing one limit.
 *
 * Each caller's log is a sorted set of its counted requests, scored by time. One Lua script drops what
 * left the window, counts, and adds the request when it is admitted, so a decision is one atomic round
 * trip (`EVALSHA`, falling back to `EVAL` once when the server does not know the script yet). Every
 * admission resets the key's expiry to the window, so idle callers vanish on their own.
 *
 * Which clock decides: the server's. Both scripts read Redis `TIME`, so every decision on a caller's
 * log is taken by the clock of the primary holding it, whatever the instances' clocks say, at no
 * extra round trip; they return the server's now, against which the headers are computed (the same
 * clock as the log's scores, so they count down consistently). The instance's own time is used only
 * to measure how far its clock is from the server's (`onServerTime`, for the warning and the metric
 * of `clock/store_clock.ts`).
 *
 * @module
 */

import {
  decide,
  type Decision,
  peekDecision,
  type RateLimitPolicy,
  type RateLimitStore,
} from "../core/decision.ts";
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
  /**
   * Receives the server's now (ms) of each reply with the monotonic times (`performance.now()`) the
   * call was sent and answered: a sample of the offset between the clocks at no extra round trip.
   */
  onServerTime?: (serverMs: number, sentMono: number, receivedMono: number) => void;
  /**
   * Decide by the `now` passed to `hit` and `peek` instead of the server's clock: only for tests that
   * inject a clock (a Redis under libfaketime does not start: jemalloc and libfaketime clash). Default
   * false.
   */
  callerClock?: boolean;
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
  readonly #onServerTime: RedisStoreOptions["onServerTime"];
  readonly #callerClock: boolean;
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
    this.#onServerTime = options.onServerTime;
    this.#callerClock = options.callerClock ?? false;
  }

  /** {@inheritDoc RateLimitStore.hit} */
  async hit(key: string, now: number): Promise<Decision> {
    this.#roundTrips++;
    // `now` only makes the member unique with the sequence; the script stamps the server's time.
    const member = `${now}:${this.#instance}:${(this.#sequence++).toString(36)}`;
    const sent = performance.now();
    const [admitted, count, oldest, serverNow] = parseReply(
      await this.#client.hit(
        logKey(this.#client.type, this.#prefix, key),
        this.#callerClock ? now : undefined,
        this.#policy,
        member,
      ),
      4,
    );
    this.#onServerTime?.(serverNow, sent, performance.now());
    // The script admits exactly when `decide` does (count < limit); `decide` shapes the answer, by
    // the server's clock, which stamped every score of the log.
    const first = admitted && oldest !== undefined ? Math.min(oldest, serverNow) : oldest;
    return decide(count, first, serverNow, this.#policy);
  }

  /** {@inheritDoc RateLimitStore.peek} */
  async peek(key: string, now: number): Promise<Decision> {
    this.#roundTrips++;
    const sent = performance.now();
    const [, count, oldest, serverNow] = parseReply(
      await this.#client.peek(
        logKey(this.#client.type, this.#prefix, key),
        this.#policy.windowMs,
        this.#callerClock ? now : undefined,
      ),
      3,
    );
    this.#onServerTime?.(serverNow, sent, performance.now());
    return peekDecision(count, oldest, serverNow, this.#policy);
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
 * Reads a script's reply: `{admitted, count, oldest, now}` from the hit script (`length` 4),
 * `{count, oldest, now}` from the peek script (3; the flag is then read as false). `oldest` is a
 * score string, or "" when the log is empty; `now` is the server's, in ms.
 */
function parseReply(
  reply: unknown,
  length: 3 | 4,
): [admitted: boolean, count: number, oldest: number | undefined, now: number] {
  if (!Array.isArray(reply) || reply.length !== length) {
    throw new TypeError(`unexpected reply from the rate-limit script: ${JSON.stringify(reply)}`);
  }
  const [flag, count, oldest, now] = length === 4 ? reply : [0, ...reply];
  if (!Number.isFinite(Number(now))) {
    throw new TypeError(`unexpected reply from the rate-limit script: ${JSON.stringify(reply)}`);
  }
  return [
    Number(flag) === 1,
    Number(count),
    oldest === "" ? undefined : Number(oldest),
    Number(now),
  ];
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
