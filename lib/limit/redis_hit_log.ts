/**
 * The `local-first` hit log on Redis (`hit_log.ts`): one stream, `<prefix>{hitlog}`, whose entries
 * are the instances' batches (fields `i` instance, `s` number, `h` hits in base64), and a hash,
 * `<prefix>{hitlog}:seq`, of each instance's last batch number. Both keys carry one hash tag, so a
 * cluster keeps them in one slot and routes every exchange to the primary owning it; Sentinel's
 * client follows the primary. One exchange is one script (`redis_scripts.ts`, `EXCHANGE_SCRIPT`):
 * append (unless that batch number is there already), trim what left the window by the server's
 * clock (`XADD … MINID ~`), read the entries after this instance's cursor: one round trip, unless
 * more than {@linkcode READ_COUNT} batches wait (a start-up's replay of a busy window), read on in
 * further round trips.
 *
 * The stream keeps a batch for the window plus {@linkcode KEEP_MARGIN_MS}, and expires whole when
 * nobody has appended for that long. A Redis restarted empty or a failover to a replica that had not
 * received the last entries loses those hits (as it loses `exact`'s logs); the cursor of an instance
 * is an id, so reading resumes after it either way.
 *
 * @module
 */

import type { HitLog, LogBatch } from "./hit_log.ts";
import type { RedisStoreClient } from "./redis_client.ts";

/** How long past the window the stream keeps a batch, in ms: a restart's replay reads that far. */
export const KEEP_MARGIN_MS = 5000;

/** Entries one round trip reads at most; a fuller reply reads on at once. */
export const READ_COUNT = 500;

/** Round trips one exchange takes at most to read what waits (a replay of 50,000 batches). */
const MAX_READS = 100;

/**
 * The largest batch, in bytes: 256 KiB (about 40,000 IPv4 hits), so that a spray's second of hits is
 * a few batches, and one script's argument stays small.
 */
export const REDIS_MAX_BATCH_BYTES = 256 * 1024;

/** The Redis hit log over a client built by `createRedisClient` (`redis_client.ts`), of any type. */
export class RedisHitLog implements HitLog {
  readonly maxBatchBytes = REDIS_MAX_BATCH_BYTES;
  readonly #client: RedisStoreClient;
  readonly #keys: [string, string];
  readonly #keepMs: string;
  readonly #ownsClient: boolean;
  #instance = "";
  #cursor = "";
  #roundTrips = 0;

  /**
   * Creates the log of `options.instance` (default: learnt from its first batch); `prefix` is the
   * stores' (default `"rate_limit:"`), `marginMs` how long past the window a batch is kept (default
   * {@linkcode KEEP_MARGIN_MS}).
   */
  constructor(
    client: RedisStoreClient,
    windowMs: number,
    options: { prefix?: string; ownsClient?: boolean; instance?: string; marginMs?: number } = {},
  ) {
    const prefix = options.prefix ?? "rate_limit:";
    this.#client = client;
    this.#keys = [`${prefix}{hitlog}`, `${prefix}{hitlog}:seq`];
    this.#keepMs = String(windowMs + (options.marginMs ?? KEEP_MARGIN_MS));
    this.#ownsClient = options.ownsClient ?? false;
    this.#instance = options.instance ?? "";
  }

  /** {@inheritDoc HitLog.roundTrips} */
  get roundTrips(): number {
    return this.#roundTrips;
  }

  /** {@inheritDoc HitLog.exchange} */
  async exchange(mine: LogBatch | null): Promise<LogBatch[]> {
    if (mine !== null) this.#instance = mine.instance;
    const batches: LogBatch[] = [];
    let append = mine;
    // The cursor moves only when the whole exchange succeeded: a read that fails half-way reads
    // everything again next time (the append is kept once by its number).
    let cursor = this.#cursor;
    for (let read = 0; read < MAX_READS; read++) {
      const args = [
        this.#keepMs,
        cursor,
        append?.instance ?? this.#instance,
        append === null ? "" : String(append.seq),
        append === null ? "" : append.hits.toBase64(),
        String(READ_COUNT),
      ];
      this.#roundTrips++;
      const reply = await this.#client.exchange(this.#keys, args);
      if (!Array.isArray(reply) || reply.length < 2 || (reply.length - 2) % 3 !== 0) {
        throw new TypeError(`unexpected reply from the rate-limit hit log: ${typeof reply}`);
      }
      append = null;
      cursor = String(reply[0]);
      for (let k = 2; k < reply.length; k += 3) {
        batches.push({
          instance: String(reply[k]),
          seq: Number(reply[k + 1]),
          hits: Uint8Array.fromBase64(String(reply[k + 2])),
        });
      }
      if (Number(reply[1]) < READ_COUNT) break;
    }
    this.#cursor = cursor;
    return batches;
  }

  /** {@inheritDoc HitLog.close} */
  async close(): Promise<void> {
    if (this.#ownsClient) await this.#client.close();
  }
}
