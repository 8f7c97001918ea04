/**
 * The sync backends of the `local-first` consistency ({@linkcode LocalFirstStore}): Redis and Deno
 * KV, each one batch per round trip (KV: per ten callers, its `getMany` limit).
 *
 * Redis keeps each caller's log as the `exact` store does (a sorted set scored by time, members
 * `<time>:<instance>:<sequence>`), so both modes read and write the same logs: one script adds this
 * instance's new hits, drops what left the window and returns the other instances' timestamps, for
 * every caller of the batch. The script touches several keys, so it needs one Redis (or a cluster
 * where the callers' keys share a hash slot), not a sharded cluster.
 *
 * KV keeps, per caller, one entry holding each instance's log under its id. An instance only ever
 * replaces its own log, so a sync is idempotent: a batch that failed is sent again whole.
 *
 * @module
 */

import { decodeLog, encodeLog } from "./rate_limit_kv.ts";
import type { SyncBackend, SyncBatch } from "./rate_limit_local_first.ts";
import type { RedisStoreClient } from "./rate_limit_redis.ts";

/**
 * KEYS = the callers' logs; ARGV = now, window ms, the instance's member tag (`:<id>:`), then per key
 * the number of new hits followed by (score, member) pairs. Returns, per key, the other instances'
 * scores in the window.
 */
const SYNC_SCRIPT = `
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local tag = ARGV[3]
local cutoff = now - window
local a = 4
local out = {}
for i, key in ipairs(KEYS) do
  local n = tonumber(ARGV[a])
  a = a + 1
  local j = 0
  while j < n do
    local args = {}
    local chunk = math.min(n - j, 500)
    for k = 1, chunk do
      args[#args + 1] = ARGV[a]
      args[#args + 1] = ARGV[a + 1]
      a = a + 2
    end
    redis.call('ZADD', key, unpack(args))
    j = j + chunk
  end
  if n > 0 then redis.call('PEXPIRE', key, window + 1000) end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff)
  local members = redis.call('ZRANGEBYSCORE', key, '(' .. cutoff, '+inf', 'WITHSCORES')
  local others = {}
  for m = 1, #members, 2 do
    if not string.find(members[m], tag, 1, true) then others[#others + 1] = members[m + 1] end
  end
  out[i] = others
end
return out
`;

/** The Redis sync backend over a client built by `createRedisClient`. */
export class RedisSyncBackend implements SyncBackend {
  readonly #client: RedisStoreClient;
  readonly #windowMs: number;
  readonly #prefix: string;
  readonly #ownsClient: boolean;
  #roundTrips = 0;

  /** Creates the backend; `prefix` must be the `exact` store's (default `"rate_limit:"`). */
  constructor(
    client: RedisStoreClient,
    windowMs: number,
    options: { prefix?: string; ownsClient?: boolean } = {},
  ) {
    this.#client = client;
    this.#windowMs = windowMs;
    this.#prefix = options.prefix ?? "rate_limit:";
    this.#ownsClient = options.ownsClient ?? false;
  }

  /** {@inheritDoc SyncBackend.roundTrips} */
  get roundTrips(): number {
    return this.#roundTrips;
  }

  /** {@inheritDoc SyncBackend.sync} */
  async sync(batch: SyncBatch): Promise<Map<string, number[]>> {
    const keys: string[] = [];
    const args = [String(batch.now), String(this.#windowMs), `:${batch.instance}:`];
    for (const [key, entry] of batch.callers) {
      keys.push(this.#prefix + key);
      args.push(String(entry.fresh.length));
      for (const [time, member] of entry.fresh) args.push(String(time), member);
    }
    this.#roundTrips++;
    const reply = await this.#client.eval(SYNC_SCRIPT, { keys, arguments: args });
    if (!Array.isArray(reply) || reply.length !== keys.length) {
      throw new TypeError(`unexpected reply from the rate-limit sync script: ${typeof reply}`);
    }
    const result = new Map<string, number[]>();
    let i = 0;
    for (const key of batch.callers.keys()) {
      const scores = reply[i++];
      result.set(key, Array.isArray(scores) ? scores.map(Number) : []);
    }
    return result;
  }

  /** {@inheritDoc SyncBackend.close} */
  async close(): Promise<void> {
    if (this.#ownsClient && this.#client.isOpen) await this.#client.close();
  }
}

/** Deno KV's most keys per `getMany`, and so the callers one KV round trip carries. */
export const KV_BATCH = 10;

/** Attempts of one chunk when another instance wrote one of its callers in between. */
const KV_ATTEMPTS = 5;

/** Extra life of an entry past the window, so that clean-up never races a sync. */
const EXPIRY_GRACE_MS = 1000;

type KvLogs = Record<string, Uint8Array>;

/** The Deno KV sync backend. */
export class KvSyncBackend implements SyncBackend {
  readonly #kv: Deno.Kv;
  readonly #windowMs: number;
  readonly #prefix: Deno.KvKey;
  readonly #ownsKv: boolean;
  #roundTrips = 0;

  /** Creates the backend over an open database. */
  constructor(
    kv: Deno.Kv,
    windowMs: number,
    options: { prefix?: Deno.KvKey; ownsKv?: boolean } = {},
  ) {
    this.#kv = kv;
    this.#windowMs = windowMs;
    this.#prefix = options.prefix ?? ["rate_limit_local_first"];
    this.#ownsKv = options.ownsKv ?? false;
  }

  /** {@inheritDoc SyncBackend.roundTrips} */
  get roundTrips(): number {
    return this.#roundTrips;
  }

  /** {@inheritDoc SyncBackend.sync} */
  async sync(batch: SyncBatch): Promise<Map<string, number[]>> {
    const keys = [...batch.callers.keys()];
    const chunks: string[][] = [];
    for (let i = 0; i < keys.length; i += KV_BATCH) chunks.push(keys.slice(i, i + KV_BATCH));
    const results = await Promise.all(chunks.map((chunk) => this.#syncChunk(batch, chunk)));
    return new Map(results.flatMap((result) => [...result]));
  }

  /** {@inheritDoc SyncBackend.close} */
  close(): void {
    if (this.#ownsKv) this.#kv.close();
  }

  async #syncChunk(batch: SyncBatch, keys: string[]): Promise<Map<string, number[]>> {
    const cutoff = batch.now - this.#windowMs;
    for (let attempt = 1;; attempt++) {
      const entries = await this.#kv.getMany<KvLogs[]>(keys.map((key) => [...this.#prefix, key]));
      this.#roundTrips++;
      const result = new Map<string, number[]>();
      const atomic = this.#kv.atomic();
      let writes = 0;
      entries.forEach((entry, i) => {
        const key = keys[i]!;
        const logs: KvLogs = { ...(entry.value ?? {}) };
        const others: number[] = [];
        for (const [instance, bytes] of Object.entries(logs)) {
          const live = decodeLog(bytes).filter((t) => t > cutoff);
          if (instance === batch.instance) continue;
          if (live.length === 0) delete logs[instance];
          else others.push(...live);
        }
        result.set(key, others);
        const mine = batch.callers.get(key)!;
        // Nothing new from here: the store already holds this instance's log.
        if (mine.fresh.length === 0) return;
        logs[batch.instance] = encodeLog(mine.log.filter((t) => t > cutoff));
        atomic.check(entry).set(entry.key, logs, { expireIn: this.#windowMs + EXPIRY_GRACE_MS });
        writes++;
      });
      if (writes === 0) return result;
      const committed = await atomic.commit().then((r) => r.ok, (error) => {
        if (error instanceof Error && /database is (locked|busy)/i.test(error.message)) {
          return false;
        }
        throw error;
      });
      this.#roundTrips++;
      if (committed) return result;
      if (attempt >= KV_ATTEMPTS) {
        throw new Error("rate-limit sync lost every race for its callers");
      }
    }
  }
}
