/**
 * The Lua scripts the limiter runs on Redis, registered with every client so that they are sent as
 * `EVALSHA` (and as `EVAL` once by the client where a server does not know them yet: `NOSCRIPT`,
 * such as a replica just promoted or a server restarted empty).
 *
 * Every script names the keys it touches, so that a Redis Cluster routes it to the node owning them
 * and a managed cluster (ElastiCache Serverless refuses a script without a key) accepts it. The
 * decision scripts touch one caller's log; the sync script touches the logs of one batch, which the
 * cluster's sync groups by hash slot first (`sync.ts`).
 *
 * @module
 */

import { defineScript } from "@redis/client";
import type { RateLimitPolicy } from "./decision.ts";

/**
 * Defines `now`: the server's clock in whole ms, unless ARGV[n] carries a time (a test's injected
 * clock, `RedisStore`'s `callerClock`). `TIME` is allowed in a script that writes since Redis 5
 * (effects replication: replicas and the AOF get the `ZADD` with its score, not the script), so every
 * decision of a caller is taken by one clock: the server's.
 */
const NOW_OR_ARGV = (n: number) => `
local now = tonumber(ARGV[${n}])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`;

/**
 * KEYS[1] = log; ARGV = window ms, limit, member[, now]. Decides by the server's clock (the
 * instance's is not sent; only tests send a `now`). Returns {admitted, count before, oldest, now}.
 */
const HIT_SCRIPT = `${NOW_OR_ARGV(4)}
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2] or ''
if count < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window + 1000)
  return {1, count, oldest, now}
end
return {0, count, oldest, now}
`;

/**
 * KEYS[1] = log; ARGV = window ms[, now]. Returns {count, oldest, now} of the window ending at the
 * server's now (a test's `now` if sent); writes nothing.
 */
const PEEK_SCRIPT = `${NOW_OR_ARGV(2)}
local cutoff = '(' .. (now - tonumber(ARGV[1]))
local count = redis.call('ZCOUNT', KEYS[1], cutoff, '+inf')
local oldest = redis.call('ZRANGEBYSCORE', KEYS[1], cutoff, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2] or ''
return {count, oldest, now}
`;

/**
 * KEYS[1] = any key (a managed cluster refuses a script without one; the key picks the primary whose
 * clock is read); returns the server's now in whole ms. The `local-first` clock's sample
 * (`store_clock.ts`).
 */
const TIME_SCRIPT = `${NOW_OR_ARGV(1)}
return now
`;

/**
 * KEYS = the callers' logs; ARGV = now, window ms, the instance's member tag (`:<id>:`), then per key
 * the number of new hits followed by (score, member) pairs. Returns, per key, the other instances'
 * scores in the window. `ZADD` of a member already there only sets its score again: a batch sent
 * twice counts once.
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

/** The scripts, by the method name each gets on a client. */
export const SCRIPTS = {
  rateLimitHit: defineScript({
    NUMBER_OF_KEYS: 1,
    SCRIPT: HIT_SCRIPT,
    // `now` is sent only when not undefined (a test's injected clock): the server's decides.
    parseCommand(
      parser,
      key: string,
      now: number | undefined,
      policy: RateLimitPolicy,
      member: string,
    ) {
      parser.pushKey(key);
      parser.push(String(policy.windowMs), String(policy.limit), member);
      if (now !== undefined) parser.push(String(now));
    },
    transformReply: (reply: unknown) => reply,
  }),
  rateLimitPeek: defineScript({
    NUMBER_OF_KEYS: 1,
    SCRIPT: PEEK_SCRIPT,
    IS_READ_ONLY: true,
    parseCommand(parser, key: string, windowMs: number, now: number | undefined) {
      parser.pushKey(key);
      parser.push(String(windowMs));
      if (now !== undefined) parser.push(String(now));
    },
    transformReply: (reply: unknown) => reply,
  }),
  rateLimitTime: defineScript({
    NUMBER_OF_KEYS: 1,
    SCRIPT: TIME_SCRIPT,
    IS_READ_ONLY: true,
    parseCommand(parser, key: string) {
      parser.pushKey(key);
    },
    transformReply: (reply: unknown) => reply,
  }),
  rateLimitSync: defineScript({
    // The number of keys varies: pushed by parseCommand before the keys.
    SCRIPT: SYNC_SCRIPT,
    parseCommand(parser, keys: string[], args: string[]) {
      parser.push(String(keys.length));
      parser.pushKeys(keys);
      parser.push(...args);
    },
    transformReply: (reply: unknown) => reply,
  }),
};
