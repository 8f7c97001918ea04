/**
 * The sync backends of the `local-first` consistency (`LocalFirstStore`): Redis (one round trip
 * per batch) and Deno KV (one round trip of time per batch).
 *
 * Redis keeps each caller's log as the `exact` store does (a sorted set scored by time, members
 * `<time>:<instance>:<sequence>`), so both modes read and write the same logs: one script adds this
 * instance's new hits, drops what left the window and returns the other instances' timestamps, for
 * every caller of the batch. On one server (or the primary Sentinel names) that is one script per
 * batch. A cluster refuses a script whose keys hash to different slots (`CROSSSLOT`), so there the
 * batch is grouped by hash slot (the logs carry one of `CLUSTER_KEY_TAGS` hash tags: at most that
 * many groups) and the groups are sent at once: the client routes each to the primary owning its
 * slot and pipelines those of one primary, so a sync costs one round trip of time and one round
 * trip per primary. Resending is harmless everywhere: a member already in a log
 * is only scored again, so a batch that failed half-way (some slots written, others not) is sent
 * again whole and counts each hit once.
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
import { logKey, type RedisStoreClient } from "./redis_client.ts";

/** The Redis sync backend over a client built by `createRedisClient` (`redis_client.ts`), of any type. */
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
    const groups = this.#groups(batch);
    const primaries = new Set<string>();
    for (const [slot, callers] of groups) {
      primaries.add(this.#client.primaryOf(slot) ?? `${slot}:${callers[0]}`);
    }
    this.#roundTrips += primaries.size;
    const replies = await Promise.all(
      [...groups.values()].map((callers) => this.#syncGroup(batch, callers)),
    );
    return new Map(replies.flat());
  }

  /** The batch's callers by hash slot of their log (one group where every key is on one server). */
  #groups(batch: SyncBatch): Map<number, string[]> {
    const groups = new Map<number, string[]>();
    for (const key of batch.callers.keys()) {
      const slot = this.#client.slotOf(logKey(this.#client.type, this.#prefix, key)) ?? 0;
      const group = groups.get(slot);
      if (group === undefined) groups.set(slot, [key]);
      else group.push(key);
    }
    return groups;
  }

  /** One script over `callers`, whose logs share a slot; answers the others' timestamps per caller. */
  async #syncGroup(batch: SyncBatch, callers: string[]): Promise<Array<[string, number[]]>> {
    const keys: string[] = [];
    const args = [String(batch.now), String(this.#windowMs), `:${batch.instance}:`];
    for (const key of callers) {
      const entry = batch.callers.get(key)!;
      keys.push(logKey(this.#client.type, this.#prefix, key));
      args.push(String(entry.fresh.length));
      for (const [time, member] of entry.fresh) args.push(String(time), member);
    }
    const reply = await this.#client.sync(keys, args);
    if (!Array.isArray(reply) || reply.length !== keys.length) {
      throw new TypeError(`unexpected reply from the rate-limit sync script: ${typeof reply}`);
    }
    return callers.map((key, i) => {
      const scores = reply[i];
      return [key, Array.isArray(scores) ? scores.map(Number) : []];
    });
  }

  /** {@inheritDoc SyncBackend.close} */
  async close(): Promise<void> {
    if (this.#ownsClient) await this.#client.close();
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
 * // A caller new to an instance waits for the store's answer once (here: nothing yet).
 * assert.equal((await b.hit("192.0.2.1", 1000)).allowed, true);
 * assert.equal((await a.hit("192.0.2.1", 1000)).allowed, true);
 * // a's sync writes its hit; b's writes its own and reads a's: the caller's limit of 2 is spent.
 * await a.sync();
 * await b.sync();
 * assert.equal((await b.hit("192.0.2.1", 1000)).allowed, false);
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
