/**
 * The `local-first` hit log on Redis (`core/hit_log.ts`): one stream, `<prefix>{hitlog}`, whose entries
 * are the instances' batches (fields `i` instance, `s` number, `h` hits in base64), and a hash,
 * `<prefix>{hitlog}:seq`, of each instance's last batch number. Both keys carry one hash tag, so a
 * cluster keeps them in one slot and routes every exchange to the primary owning it; Sentinel's
 * client follows the primary. One exchange is one script (`redis_scripts.ts`, `EXCHANGE_SCRIPT`):
 * append (unless that batch number is there already), trim what left the window by the server's
 * clock (`XADD … MINID ~`), read the entries after this instance's cursor: one round trip, unless
 * more than {@linkcode READ_COUNT} batches or {@linkcode READ_BYTES} of hits wait (a start-up's
 * replay of a busy window), read on in further round trips until {@linkcode EXCHANGE_BYTES}: the
 * rest is the next exchange's (`more`), so a replay is held one chunk at a time, whatever the log's
 * size.
 *
 * Nothing in the stream is trusted: an entry lacking a field, with a number that is not one or hits
 * that are not base64 is skipped and counted (`health`), and the cursor moves past it. A batch is
 * kept once only when its number is its writer's last one (a batch sent again), so an entry that
 * sets another writer's number holds back at most the one batch of that number, and this log says
 * so (`tampered`) when its own first send is refused; a stream whose newest id is ahead of the
 * server's clock (a forged id, a primary whose clock stepped back: its trimming by time keeps every
 * entry after it) is counted too.
 *
 * The stream keeps a batch for the window plus {@linkcode KEEP_MARGIN_MS}, and expires whole when
 * nobody has appended for that long. A Redis restarted empty or a failover to a replica that had not
 * received the last entries loses those hits (as it loses `exact`'s logs); the cursor of an instance
 * is an id, so reading resumes after it either way.
 *
 * @module
 */

import type { HitLog, LogBatch, LogHealth } from "../core/hit_log.ts";
import type { RedisStoreClient } from "./redis_client.ts";
import { fromBase64, toBase64 } from "../../text/base64.ts";

/** How long past the window the stream keeps a batch, in ms: a restart's replay reads that far. */
export const KEEP_MARGIN_MS = 5000;

/** Entries one round trip reads at most; a fuller reply reads on at once. */
export const READ_COUNT = 500;

/** Bytes of hits (base64) one round trip reads at most: the read stops after the entry crossing it. */
export const READ_BYTES = 512 * 1024;

/**
 * Bytes of hits one exchange reads at most (its round trips stop after the one crossing it): what a
 * replay holds at once, about 6 MiB with the batches decoded.
 */
export const EXCHANGE_BYTES = 1024 * 1024;

/** Round trips one exchange takes at most to read what waits. */
const MAX_READS = 100;

/** How far ahead of the server's clock the stream's newest id may be before it is reported (ms). */
const IDS_AHEAD_MS = 60_000;

/** The longest instance id read from the stream (ids are 13 characters). */
const MAX_INSTANCE_LENGTH = 256;

/**
 * The largest batch, in bytes: 256 KiB (about 40,000 IPv4 hits), so that a spray's second of hits is
 * a few batches, and one script's argument stays small.
 */
export const REDIS_MAX_BATCH_BYTES = 256 * 1024;

/** The base64 of the largest batch, in characters. */
const BASE64_MAX = Math.ceil(REDIS_MAX_BATCH_BYTES / 3) * 4;

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
  #more = false;
  /** The number of the last batch this log sent (a batch sent again has the same). */
  #lastSent = -1;
  readonly #health: LogHealth = {
    unreadable: 0,
    unreadableReason: "",
    tampered: 0,
    tamperedReason: "",
  };

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

  /** {@inheritDoc HitLog.more} */
  get more(): boolean {
    return this.#more;
  }

  /** {@inheritDoc HitLog.health} */
  get health(): LogHealth {
    return this.#health;
  }

  /** {@inheritDoc HitLog.exchange} */
  async exchange(mine: LogBatch | null): Promise<LogBatch[]> {
    if (mine !== null) this.#instance = mine.instance;
    const batches: LogBatch[] = [];
    let append = mine;
    // The cursor moves only when the whole exchange succeeded: a read that fails half-way reads
    // everything again next time (the append is kept once by its number).
    let cursor = this.#cursor;
    let bytes = 0;
    let more = false;
    // Taken before the round trip: a batch whose exchange timed out after it landed is sent again
    // with the same number, and its refusal then is no sign of anything.
    const firstSend = mine !== null && mine.seq !== this.#lastSent;
    if (mine !== null) this.#lastSent = mine.seq;
    for (let read = 0; read < MAX_READS && bytes < EXCHANGE_BYTES; read++) {
      const args = [
        this.#keepMs,
        cursor,
        append?.instance ?? this.#instance,
        append === null ? "" : String(append.seq),
        append === null ? "" : toBase64(append.hits),
        String(READ_COUNT),
        String(READ_BYTES),
      ];
      this.#roundTrips++;
      const reply = await this.#client.exchange(this.#keys, args);
      if (!Array.isArray(reply) || reply.length < 4 || (reply.length - 4) % 3 !== 0) {
        throw new TypeError(`unexpected reply from the rate-limit hit log: ${typeof reply}`);
      }
      if (append !== null && firstSend && Number(reply[2]) === 0) {
        this.#tampered(
          `batch ${append.seq} of this instance was refused the first time it was sent: an entry it did not write set its number`,
        );
      }
      append = null;
      cursor = String(reply[0]);
      if (read === 0 && Number(reply[3]) > IDS_AHEAD_MS) {
        this.#tampered(
          `the stream's newest id is ${
            Math.round(Number(reply[3]) / 1000)
          } s ahead of the server's clock: its trimming by time keeps every entry after it`,
        );
      }
      bytes += this.#decode(reply, batches);
      more = Number(reply[1]) === 1;
      if (!more) break;
    }
    this.#cursor = cursor;
    this.#more = more;
    return batches;
  }

  /** Reads the entries of one reply into `batches`, skipping those that are not batches; its bytes. */
  #decode(reply: unknown[], batches: LogBatch[]): number {
    let bytes = 0;
    for (let k = 4; k < reply.length; k += 3) {
      const instance = reply[k];
      const seq = Number(reply[k + 1]);
      const hits = reply[k + 2];
      if (typeof hits === "string") bytes += hits.length;
      if (
        typeof instance !== "string" || instance === "" || instance.length > MAX_INSTANCE_LENGTH ||
        !Number.isSafeInteger(seq) || seq < 0 || typeof hits !== "string" ||
        hits.length > BASE64_MAX
      ) {
        this.#unreadable("an entry without a writer, a number or hits of a batch's size");
        continue;
      }
      try {
        batches.push({ instance, seq, hits: fromBase64(hits) });
      } catch {
        this.#unreadable("an entry whose hits are not base64");
      }
    }
    return bytes;
  }

  #unreadable(reason: string): void {
    this.#health.unreadable++;
    this.#health.unreadableReason = reason;
  }

  #tampered(reason: string): void {
    this.#health.tampered++;
    this.#health.tamperedReason = reason;
  }

  /** {@inheritDoc HitLog.close} */
  async close(): Promise<void> {
    if (this.#ownsClient) await this.#client.close();
  }
}
