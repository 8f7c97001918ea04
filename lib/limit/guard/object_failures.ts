/**
 * The failure policy over a store of many objects (Durable Objects: one per caller, or per shard),
 * for `GuardedStore` (`guarded_store.ts`): a failure is its object's, and only a failure of
 * objects that no caller owns is the whole store's.
 *
 * - Each object that failed has a breaker of its own ({@linkcode ObjectBreakers}): its callers alone
 *   are answered by the policy, and it is called again once a probe interval.
 * - Such a caller's answer: `closed` refuses; `open` admits within the instance's own count of it
 *   (`localCount`, the memory store: at most the limit per window here), so that making one's own
 *   object fail is no way around the limit. Each such caller is said, a line per window at most
 *   ({@linkcode CallerNotices}).
 * - When an object fails, the canaries are asked ({@linkcode NamespaceWatch}); if every one fails
 *   too, the namespace is down: one incident, and every caller is answered by the policy without a
 *   call until a canary answers again (checked by one request a probe interval).
 *
 * So no number of failing caller keys changes a healthy caller's answer: its own object decides it,
 * or, in an outage the canaries confirm, the policy decides everyone's alike.
 *
 * @module
 */

import type { BreakerState, CircuitBreakerOptions } from "./circuit_breaker.ts";
import { type CallerNotice, CallerNotices } from "./caller_notices.ts";
import { NamespaceWatch, type WatchOutcome } from "./namespace_watch.ts";
import { ObjectBreakers } from "./object_breakers.ts";
import {
  type Decision,
  pending,
  type RateLimitPolicy,
  type RateLimitStore,
} from "../core/decision.ts";
import { namedMessageOf } from "../../text/error_message.ts";

/** What {@linkcode ObjectFailures} is given by its guard. */
export interface ObjectFailuresOptions {
  /** The object that answers `key`'s calls. */
  scopeOf: (key: string) => string;
  /** The canaries' calls, each bounded by the store timeout (none: the namespace is never down). */
  canaries: ReadonlyArray<() => Promise<unknown>>;
  /** The limit and window (the windows of the lines). */
  policy: RateLimitPolicy;
  /** Whether the policy admits (`open`) or refuses (`closed`). */
  open: boolean;
  /** The policy's answer (uncounted admission, or `rate_limit_unavailable`). */
  fallback: Decision;
  /** Under `open`, makes the instance's own count of the callers whose object fails. */
  localCount: (() => RateLimitStore) | undefined;
  /** Names a caller (truncated) and writes its line; omitted, nothing is written. */
  notices: { label: (key: string) => string; write: (notice: CallerNotice) => void } | undefined;
  /** Each object's breaker. */
  breaker: CircuitBreakerOptions;
  /** The least time between two checks of the canaries, in ms. */
  probeIntervalMs: number;
  /** Clock, in ms. */
  clock: () => number;
  /** Bounds a call by the store timeout. */
  bounded: <T>(result: Promise<T>) => Promise<T>;
  /** The guard's incident: started (the namespace went down), answered, ended. */
  incident: {
    start(error: unknown): void;
    answered(): void;
    end(): void;
  };
}

/** The path of a guard's calls to a store of many objects. */
export class ObjectFailures {
  readonly #options: ObjectFailuresOptions;
  readonly #objects: ObjectBreakers;
  readonly #watch: NamespaceWatch | undefined;
  readonly #notices: CallerNotices | undefined;
  #local: RateLimitStore | undefined;
  /** The answers of the instance's own count, told apart from the store's by identity. */
  readonly #counted = new WeakSet<Decision>();
  #answered = 0;

  /** Creates the path; nothing is called until the first request. */
  constructor(options: ObjectFailuresOptions) {
    this.#options = options;
    this.#objects = new ObjectBreakers(options.breaker);
    this.#watch = options.canaries.length === 0 ? undefined : new NamespaceWatch({
      canaries: options.canaries,
      probeIntervalMs: options.probeIntervalMs,
      clock: options.clock,
    });
    const notices = options.notices;
    this.#notices = notices && new CallerNotices({
      windowMs: options.policy.windowMs,
      label: notices.label,
      clock: options.clock,
    });
  }

  /** The namespace's state: `open` while it is down as a whole. */
  get state(): BreakerState {
    return this.#watch?.state ?? "closed";
  }

  /** Objects whose own breaker is open or probing now. */
  get failingObjects(): number {
    return this.#objects.open;
  }

  /** Requests answered by the policy because their own object failed, the namespace up. */
  get answeredForObject(): number {
    return this.#answered;
  }

  /** Whether `decision` is an answer of the instance's own count. */
  countedHere(decision: Decision): boolean {
    return this.#counted.has(decision);
  }

  /**
   * Decides a request of `key` at `now`: while the namespace is down, the policy answers without
   * a call (one request a probe interval checks the canaries first); else the caller's own object.
   */
  call(
    key: string,
    now: number,
    call: () => Decision | Promise<Decision>,
  ): Decision | Promise<Decision> {
    const scope = this.#options.scopeOf(key);
    const watch = this.#watch;
    if (watch === undefined || !watch.down) return this.#ask(key, scope, now, call);
    if (!watch.due) return this.#byIncident();
    return watch.check().then((outcome) => {
      this.#watched(outcome);
      return watch.down ? this.#byIncident() : this.#ask(key, scope, now, call);
    });
  }

  /** Asks `scope`'s object, unless its own breaker is open. */
  #ask(
    key: string,
    scope: string,
    now: number,
    call: () => Decision | Promise<Decision>,
  ): Decision | Promise<Decision> {
    const objects = this.#objects;
    const own = objects.get(scope);
    if (own !== undefined && !own.allow()) return this.#ownFailure(key, now, undefined);
    let result: Decision | Promise<Decision>;
    try {
      result = call();
    } catch (error) {
      return this.#failed(key, scope, now, error);
    }
    if (!pending(result)) {
      objects.success(scope);
      return result;
    }
    return this.#options.bounded(Promise.resolve(result)).then(
      (decision) => {
        objects.success(scope);
        return decision;
      },
      (error) => this.#failed(key, scope, now, error),
    );
  }

  /**
   * `scope`'s object failed: its breaker counts it and, when a check is due, the canaries tell
   * whether the namespace is down (the incident answers) or the failure is the caller's own.
   */
  #failed(key: string, scope: string, now: number, error: unknown): Decision | Promise<Decision> {
    this.#objects.failure(scope);
    const watch = this.#watch;
    if (watch?.down) return this.#byIncident();
    if (watch === undefined || !watch.due) return this.#ownFailure(key, now, error);
    return watch.check().then((outcome) => {
      this.#watched(outcome);
      return watch.down ? this.#byIncident() : this.#ownFailure(key, now, error);
    });
  }

  #byIncident(): Decision {
    this.#options.incident.answered();
    return this.#options.fallback;
  }

  #watched(outcome: WatchOutcome): void {
    if (outcome.transition === "tripped") this.#options.incident.start(outcome.error);
    if (outcome.transition === "recovered") this.#options.incident.end();
  }

  /**
   * The answer to a caller whose own object failed, the namespace up: `closed` refuses, `open`
   * admits within the instance's own count; the first such answer of a caller in a window is said.
   */
  #ownFailure(key: string, now: number, error: unknown): Decision | Promise<Decision> {
    this.#answered++;
    const notice = this.#notices?.note(
      key,
      error === undefined ? undefined : namedMessageOf(error),
    );
    if (notice !== undefined) this.#options.notices!.write(notice);
    const localCount = this.#options.localCount;
    if (!this.#options.open || localCount === undefined) return this.#options.fallback;
    this.#local ??= localCount();
    const counted = this.#local.hit(key, now);
    return pending(counted)
      ? Promise.resolve(counted).then((decision) => this.#here(decision))
      : this.#here(counted);
  }

  /** A decision of the instance's own count, as a new object the guard can tell apart. */
  #here(decision: Decision): Decision {
    const { allowed, remaining, resetSeconds } = decision;
    const answer = { allowed, remaining, resetSeconds };
    this.#counted.add(answer);
    return answer;
  }
}
