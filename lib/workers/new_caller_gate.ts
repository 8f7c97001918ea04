/**
 * The budget of new callers per IPv6 /48: a first gate, kept by the Workers Rate Limiting API
 * (the binding `NEW_CALLERS` of wrangler.json's `ratelimits`), before a caller's Durable Object
 * writes anything.
 *
 * Why: each new IPv6 /64 is a caller key of its own, and its first request creates its object's
 * storage (its log and an idle alarm, two rows), then the alarm a day later: $5.22 a million
 * against $2.07 for a returning caller (lib/limit/README.md, "Durable Objects on Workers"). A /48
 * holds 65,536 /64s and is one site (a tunnel broker hands one out for nothing), so a spray from it
 * is a bill. The gate counts, per /48, the callers its objects have never held; past the budget
 * (`simple.limit` per `simple.period` seconds, the operator's, in wrangler.json) such a caller is
 * decided by its object exactly as any other, but kept in the object's memory only: nothing
 * written, no alarm. Its next request, while the object still holds it, writes its log. A /64 that
 * asks once costs what a refusal asked of its object costs, $1.07 a million, and the budget is
 * never a refusal (issue 31: a /48 shares no aggregate budget): every answer is the exact log's.
 *
 * What is not exact: a caller kept in memory holds one hit that storage does not, lost if its
 * object leaves memory before the caller's next request (an idle object is hibernated after about
 * 10 s, a deploy restarts it). lib/limit/README.md ("A spray of new callers") bounds it.
 *
 * Where: in the object, which alone knows whether a caller is new (it holds the caller's log or
 * it does not), so that a returning caller never reaches the gate: no call, no cost, no change to
 * its answer, in any isolate. Only IPv6 callers are gated (an IPv4 address, a no-address key or a
 * shard's key pass), and concurrent first requests of one caller share one call of the binding.
 * The binding counts per Cloudflare location, approximately, and costs nothing of its own
 * (Cloudflare's docs: "Locality", "Performance", "Accuracy"); a binding that fails lets new
 * callers be written as without it, said once per object.
 *
 * @module
 */
// deno-lint-ignore-file no-console -- Workers' logs are the console

/** The Rate Limiting binding that budgets new callers per /48 (wrangler.json `ratelimits`). */
export const NEW_CALLERS_BINDING = "NEW_CALLERS";

/** The Workers Rate Limiting API, as a binding exposes it. */
export interface RateLimitBinding {
  /** Counts one call for `key`; `success` is false past the budget of the binding's period. */
  limit(options: { key: string }): Promise<{ success: boolean }>;
}

/** The gate: whether a caller the object has never held may be written now. */
export interface NewCallerGate {
  /** True at once for a caller the gate does not budget; else the binding's answer, shared. */
  admit(key: string): boolean | Promise<boolean>;
}

/**
 * The /48 an IPv6 caller key belongs to (`2001:0db8:0001:0002::/64` is in `2001:0db8:0001::/48`);
 * undefined for any other key (an IPv4 address, the no-address key, a shard's name).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(networkOf("2001:0db8:0001:0002::/64"), "2001:0db8:0001::/48");
 * assert.equal(networkOf("192.0.2.1"), undefined);
 * ```
 */
export function networkOf(key: string): string | undefined {
  // Caller keys write a /64 as four hextets of four digits each (`keyOfIp`): 24 characters.
  if (key.length !== 24 || !key.endsWith("::/64")) return undefined;
  return `${key.slice(0, 14)}::/48`;
}

/**
 * The gate over the binding `NEW_CALLERS` of `env` (a Worker's or an object's bindings), or
 * undefined when it is not bound (no gate: every new caller is written). A failing binding is
 * `say`-ed once (the console by default: Workers Logs).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * let calls = 0;
 * const binding = { limit: () => Promise.resolve({ success: ++calls <= 1 }) };
 * const gate = newCallerGate({ NEW_CALLERS: binding })!;
 * assert.equal(gate.admit("192.0.2.1"), true); // IPv4: not budgeted, no call
 * assert.equal(await gate.admit("2001:0db8:0001:0002::/64"), true);
 * assert.equal(await gate.admit("2001:0db8:0001:0003::/64"), false); // the /48's budget is spent
 * assert.equal(calls, 2);
 * assert.equal(newCallerGate({}), undefined);
 * ```
 */
export function newCallerGate(
  env: unknown,
  say: (message: string) => void = (message) => console.error(message),
): NewCallerGate | undefined {
  const binding = (env as Record<string, unknown> | null)?.[NEW_CALLERS_BINDING];
  if (typeof (binding as Partial<RateLimitBinding> | undefined)?.limit !== "function") {
    return undefined;
  }
  const limiter = binding as RateLimitBinding;
  // A caller's first requests in flight at once share its one call: a burst is one new caller.
  const pending = new Map<string, Promise<boolean>>();
  let said = false;
  return {
    admit(key) {
      const network = networkOf(key);
      if (network === undefined) return true;
      let asked = pending.get(key);
      if (asked === undefined) {
        asked = Promise.resolve()
          .then(() => limiter.limit({ key: network }))
          .then(({ success }) => success === true, (error) => {
            if (!said) {
              said = true;
              say(
                `the ${NEW_CALLERS_BINDING} rate-limiting binding failed: new callers are written unbudgeted (the limit itself still holds): ${
                  String(error)
                }`,
              );
            }
            return true;
          })
          .finally(() => pending.delete(key));
        pending.set(key, asked);
      }
      return asked;
    },
  };
}
