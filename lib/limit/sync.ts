/**
 * The sync backends of the `local-first` consistency (`LocalFirstStore`): Redis (one round trip
 * per batch) and Deno KV (one round trip of time per batch).
 *
 * Redis keeps each caller's log as the `exact` store does (a sorted set scored by time, members
 * `<time>:<instance>:<sequence>`), so both modes read and write the same logs: one script adds this
 * instance's new hits, drops what left the window and returns the other instances' timestamps, for
 * every caller of the batch. The script touches several keys, so it needs one Redis (or a cluster
 * where the callers' keys share a hash slot), not a sharded cluster.
 *
 * KV keeps one entry per caller and instance: that instance's log. An instance only ever replaces
 * its own entries, with blind writes that cannot conflict, and a sync is idempotent: a batch that
 * failed is sent again whole. Each caller's entries are read with one `list`, all in parallel, so a
 * sync takes one round trip of time but one read per caller active here.
 *
 * @module
 */

import { decodeLog, encodeLog } from "./kv.ts";
import type { SyncBackend, SyncBatch } from "./local_first.ts";
import type { RedisStoreClient } from "./redis.ts";

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

/**
 * The most callers one KV sync carries: each costs a `list`, and a thousand of them took more than a
 * second on a saturated machine (two `deno serve --parallel` workers on one file).
 */
export const KV_SYNC_CALLERS = 100;

/** Callers written by one atomic operation (each value is at most 64 KiB; the whole, 800 KiB). */
export const KV_WRITE_BATCH = 10;

/** Extra life of an entry past the window, so that clean-up never races a sync. */
const EXPIRY_GRACE_MS = 1000;

/**
 * The Deno KV sync backend.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { LocalFirstStore } from "./local_first.ts";
 * // Two instances share one database; each decides locally (the syncs are run by hand here).
 * const kv = await Deno.openKv(":memory:");
 * const policy = { limit: 2, windowMs: 60_000 };
 * const options = { syncMs: 50, syncTimeoutMs: 1000, autoSync: false, clock: () => 1000 };
 * const a = new LocalFirstStore(new KvSyncBackend(kv, policy.windowMs), policy, options);
 * const b = new LocalFirstStore(new KvSyncBackend(kv, policy.windowMs), policy, options);
 * assert.equal(b.hit("192.0.2.1", 1000).allowed, true);
 * assert.equal(a.hit("192.0.2.1", 1000).allowed, true);
 * // a's sync writes its hit; b's writes its own and reads a's: the caller's limit of 2 is spent.
 * await a.sync();
 * await b.sync();
 * assert.equal(b.hit("192.0.2.1", 1000).allowed, false);
 * await a.close();
 * await b.close();
 * kv.close();
 * ```
 */
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

  /** {@inheritDoc SyncBackend.maxCallers} */
  get maxCallers(): number {
    return KV_SYNC_CALLERS;
  }

  /**
   * Writes this instance's log of every caller with new hits (blind sets: only this instance writes
   * its own entries, so nothing can conflict) and lists each caller's entries, all at once.
   */
  async sync(batch: SyncBatch): Promise<Map<string, number[]>> {
    const keys = [...batch.callers.keys()];
    const changed = keys.filter((key) => batch.callers.get(key)!.fresh.length > 0);
    const writes: Promise<unknown>[] = [];
    for (let i = 0; i < changed.length; i += KV_WRITE_BATCH) {
      writes.push(this.#write(batch, changed.slice(i, i + KV_WRITE_BATCH)));
    }
    const reads = keys.map(async (key) => [key, await this.#others(batch, key)] as const);
    const [, others] = await Promise.all([Promise.all(writes), Promise.all(reads)]);
    return new Map(others);
  }

  /** {@inheritDoc SyncBackend.close} */
  close(): void {
    if (this.#ownsKv) this.#kv.close();
  }

  async #write(batch: SyncBatch, keys: string[]): Promise<void> {
    const cutoff = batch.now - this.#windowMs;
    const atomic = this.#kv.atomic();
    for (const key of keys) {
      const log = batch.callers.get(key)!.log.filter((t) => t > cutoff);
      atomic.set([...this.#prefix, key, batch.instance], encodeLog(log), {
        expireIn: this.#windowMs + EXPIRY_GRACE_MS,
      });
    }
    this.#roundTrips++;
    const result = await atomic.commit();
    if (!result.ok) throw new Error("rate-limit sync: KV refused the write");
  }

  async #others(batch: SyncBatch, key: string): Promise<number[]> {
    const cutoff = batch.now - this.#windowMs;
    const others: number[] = [];
    this.#roundTrips++;
    for await (const entry of this.#kv.list<Uint8Array>({ prefix: [...this.#prefix, key] })) {
      if (entry.key[entry.key.length - 1] === batch.instance) continue;
      for (const t of decodeLog(entry.value)) if (t > cutoff) others.push(t);
    }
    return others;
  }
}
