/**
 * The rate limiter's Durable Object: the one owner of its callers' exact sliding logs on Workers
 * (`lib/limit/durable_object/durable_object_store.ts` is the Worker's side, `lib/limit/durable_object/object_logs.ts` the decision).
 *
 * The logs live in memory and are written through to the object's storage, one value per caller
 * (its timestamps as a `Float64Array`), so that an object evicted from memory, moved, or restarted
 * by a deployment reads its callers' counts back. A write is not awaited: the platform's output
 * gate holds the answer until the write is durable, and a failed write breaks the object and the
 * call, which the Worker's failure policy answers. The logs are read once, before the first call is
 * delivered (`blockConcurrencyWhile`), so every decision after that is synchronous.
 *
 * Bounded: at most `OBJECT_MAX_TIMESTAMPS` timestamps, in memory and in storage (`lib/limit/durable_object/object_logs.ts`).
 * Idle callers are dropped by an alarm set `IDLE_AFTER_MS` (a day, the longest window) after the
 * first counted request; it forgets the callers with nothing counted in that time, deletes their
 * values, and sets itself again for the next caller to become idle. When no caller is left it
 * deletes all of the object's storage, so an idle object costs nothing.
 *
 * The policy arrives with every call, from the Worker's validated configuration: one source of
 * truth, and a deployment that changes it needs no migration. Nothing of it is stored: a caller's
 * value is its newest `limit` hits, right under any window, and the sweep waits out the longest
 * window, so a window lengthened in a deploy hands out no quota. A new caller costs two rows
 * written (its value and the alarm), an admitted request one. Values stored by the earlier layout
 * (the same `Float64Array` per caller, plus a `window` key now unread and deleted with the rest)
 * are read as they are: a deploy keeps every count. A caller it does not hold is written at once
 * only within its /48's budget of new callers, when `NEW_CALLERS` is bound (`new_caller_gate.ts`);
 * past it, the caller is decided exactly all the same, kept in memory only (nothing written, no
 * alarm), and its log is written at its next request, if the object still holds it then.
 *
 * @module
 */

import { DurableObject } from "cloudflare:workers";
import type { Decision, RateLimitPolicy } from "../limit/core/decision.ts";
import {
  CallerLogs,
  checkDurablePolicy,
  checkKey,
  IDLE_AFTER_MS,
  type LogChange,
  logOfStored,
} from "../limit/durable_object/object_logs.ts";
import { type NewCallerGate, newCallerGate } from "./new_caller_gate.ts";

/** The parts of `DurableObjectStorage` the object uses. */
interface Storage {
  get<T>(key: string): Promise<T | undefined>;
  list<T>(options: { prefix: string }): Promise<Map<string, T>>;
  put(key: string, value: unknown): Promise<void>;
  delete(keys: string[]): Promise<number>;
  deleteAll(): Promise<void>;
  getAlarm(): Promise<number | null>;
  setAlarm(scheduled: number): Promise<void>;
}

/** The parts of `DurableObjectState` the object uses. */
interface State {
  storage: Storage;
  blockConcurrencyWhile<T>(callback: () => Promise<T>): Promise<T>;
}

/** What {@linkcode RateLimiterObject.usage} reports: the object's own accounting. */
export interface ObjectUsage {
  /** Callers held. */
  callers: number;
  /** Of those, callers held in memory only (their /48 past the new callers' budget). */
  unwritten: number;
  /** Timestamps held, over every caller. */
  timestamps: number;
  /** Values in storage (one per caller held, once written). */
  stored: number;
  /** When the idle sweep runs next (ms since the epoch), or null. */
  alarm: number | null;
}

/** The most keys one `delete` takes. */
const DELETE_BATCH = 128;

/** The prefix of a caller's stored log: the rest of the key is the caller key. */
const CALLER = "c:";

/** The rate limiter's Durable Object class (bound as `RATE_LIMITER`, with a SQLite-backed migration). */
export class RateLimiterObject extends DurableObject {
  declare readonly ctx: State;
  readonly #logs = new CallerLogs();
  /** When the alarm is set for, as this object set it; undefined when none is. */
  #alarmAt: number | undefined;

  /** The budget of new callers per /48, when `NEW_CALLERS` is bound. */
  readonly #gate: NewCallerGate | undefined;

  /** Reads the stored logs before the first call is delivered. */
  constructor(ctx: State, env: unknown) {
    super(ctx, env);
    this.#gate = newCallerGate(env);
    void ctx.blockConcurrencyWhile(async () => {
      const stored = await ctx.storage.list({ prefix: CALLER });
      for (const [key, value] of stored) {
        this.#logs.load(key.slice(CALLER.length), logOfStored(value));
      }
      this.#alarmAt = (await ctx.storage.getAlarm()) ?? undefined;
    });
  }

  /** How long a caller is kept after its newest counted request (a test may shorten it). */
  protected get idleAfterMs(): number {
    return IDLE_AFTER_MS;
  }

  /**
   * Decides on a request of `key` now, counts it when admitted, and writes the change through. A
   * caller this object does not hold is first asked of the new callers' budget
   * (`new_caller_gate.ts`); past it, the caller is decided all the same and kept in memory only,
   * until its next request writes it. Either way the answer is the exact log's.
   */
  hit(key: string, policy: RateLimitPolicy): Decision | Promise<Decision> {
    checkKey(key);
    checkDurablePolicy(policy);
    const written = this.#gate === undefined || this.#logs.has(key) || this.#gate.admit(key);
    if (written === true) return this.#decide(key, policy, false);
    // Held by the time the gate answered (a request of the caller's in flight beside it): it came
    // back, and is written then whatever the gate said.
    return Promise.resolve(written).then((yes) => this.#decide(key, policy, !yes));
  }

  #decide(key: string, policy: RateLimitPolicy, inMemory: boolean): Decision {
    const now = Date.now();
    const { decision, changes } = this.#logs.hit(key, now, policy, inMemory);
    if (changes.length > 0) {
      this.#write(changes);
      const stored = changes.some((change) => change.log !== undefined);
      if (stored && this.#alarmAt === undefined) this.#setAlarm(now + this.idleAfterMs);
    }
    return decision; // a refusal's exact reset (`resetMs`) too: the isolate answers it from memory
  }

  /** Reports `key`'s state now without counting anything. */
  peek(key: string, policy: RateLimitPolicy): Decision {
    checkKey(key);
    checkDurablePolicy(policy);
    return this.#logs.peek(key, Date.now(), policy);
  }

  /** The object's callers, timestamps, stored values and alarm (for tests and operators). */
  async usage(): Promise<ObjectUsage> {
    const stored = (await this.ctx.storage.list({ prefix: CALLER })).size;
    return {
      callers: this.#logs.callers,
      unwritten: this.#logs.unwritten,
      timestamps: this.#logs.timestamps,
      stored,
      alarm: await this.ctx.storage.getAlarm(),
    };
  }

  /** The idle sweep: forgets idle callers, and sets the next sweep or empties the storage. */
  async alarm(): Promise<void> {
    this.#alarmAt = undefined;
    const { removed, nextAt } = this.#logs.sweep(Date.now(), this.idleAfterMs);
    if (nextAt === undefined) {
      await this.ctx.storage.deleteAll();
      return;
    }
    const keys = removed.map((key) => CALLER + key);
    for (let i = 0; i < keys.length; i += DELETE_BATCH) {
      await this.ctx.storage.delete(keys.slice(i, i + DELETE_BATCH));
    }
    this.#setAlarm(nextAt);
  }

  #write(changes: LogChange[]): void {
    const storage = this.ctx.storage;
    for (const { key, log } of changes) {
      if (log === undefined) void storage.delete([CALLER + key]);
      else void storage.put(CALLER + key, Float64Array.from(log));
    }
  }

  #setAlarm(at: number): void {
    this.#alarmAt = at;
    void this.ctx.storage.setAlarm(at);
  }
}
