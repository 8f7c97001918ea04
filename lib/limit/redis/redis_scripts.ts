/**
 * The Lua scripts the limiter runs on Redis, registered with every client so that they are sent as
 * `EVALSHA` (and as `EVAL` once by the client where a server does not know them yet: `NOSCRIPT`,
 * such as a replica just promoted or a server restarted empty).
 *
 * Every script names the keys it touches, so that a Redis Cluster routes it to the node owning them
 * and a managed cluster (ElastiCache Serverless refuses a script without a key) accepts it. The
 * decision scripts touch one caller's log; the exchange script touches the hit log's two keys, which
 * share one hash tag.
 *
 * @module
 */

import { defineScript } from "@redis/client";
import type { RateLimitPolicy } from "../core/decision.ts";

/**
 * Defines `serverNow()`: the server's clock in whole ms. `TIME` is allowed in a script that writes
 * since Redis 5 (effects replication: replicas and the AOF get the `ZADD` with its score, not the
 * script), so every decision of a caller is taken by one clock: the server's.
 */
const SERVER_NOW = `
local function serverNow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`;

/**
 * Defines `now`: the server's clock, unless ARGV[n] carries a time (a test's injected clock,
 * `RedisStore`'s `callerClock`).
 */
const NOW_OR_ARGV = (n: number) =>
  `${SERVER_NOW}
local now = tonumber(ARGV[${n}]) or serverNow()
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
 * (`clock/store_clock.ts`).
 */
const TIME_SCRIPT = `${NOW_OR_ARGV(1)}
return now
`;

/**
 * The `local-first` hit log's exchange (`redis_hit_log.ts`). KEYS[1] = the stream, KEYS[2] = the
 * hash of each instance's last batch number (one hash tag: one slot on a cluster). ARGV = how long
 * the stream keeps a batch (ms), the id read last (empty: read the last window), the instance, the
 * batch's number and hits (base64; empty: nothing to append), the most entries read, the most bytes
 * of hits read (the read stops after the entry that crosses it).
 *
 * Appends the batch unless that instance's last number is this one (the same batch sent again after
 * an exchange that timed out and landed), trimming what is older than the window (`MINID ~`, by the
 * server's clock), then reads the entries after the id read last, a few at a time until either
 * bound: returns {the last id read, 1 if a bound stopped the read (more may wait) else 0, the append's
 * outcome (1 appended, 0 kept once, -1 nothing to append), how far the stream's newest id is ahead of
 * the server's clock (ms, 0 if not), then instance, number, hits of every entry of another
 * instance}. A field an entry lacks is returned empty (the reader skips the entry), so that no entry
 * can change the reply's shape. When nothing follows the id read last and the stream ends before it
 * (a failover) or is gone, the id returned is the stream's end (or empty: read from the window's
 * start), so that new entries are not skipped.
 */
const EXCHANGE_SCRIPT = `${SERVER_NOW}
local now = serverNow()
local keep = tonumber(ARGV[1])
local minid = tostring(now - keep)
local instance = ARGV[3]
local appended = -1
if ARGV[4] ~= '' then
  appended = 0
  if redis.call('HGET', KEYS[2], instance) ~= ARGV[4] then
    redis.call('XADD', KEYS[1], 'MINID', '~', minid, '*', 'i', instance, 's', ARGV[4], 'h', ARGV[5])
    redis.call('HSET', KEYS[2], instance, ARGV[4])
    redis.call('PEXPIRE', KEYS[2], keep)
    redis.call('PEXPIRE', KEYS[1], keep)
    appended = 1
  end
end
local from = minid
if ARGV[2] ~= '' then from = '(' .. ARGV[2] end
local most = tonumber(ARGV[6])
local budget = tonumber(ARGV[7])
local out = {ARGV[2], 0, appended, 0}
local read, bytes = 0, 0
while read < most and bytes < budget do
  local entries = redis.call('XRANGE', KEYS[1], from, '+', 'COUNT', math.min(8, most - read))
  for _, entry in ipairs(entries) do
    local f = entry[2]
    local fields = {}
    for k = 1, #f - 1, 2 do fields[f[k]] = f[k + 1] end
    local i = fields['i'] or ''
    if i ~= instance then
      local h = fields['h'] or ''
      out[#out + 1] = i
      out[#out + 1] = fields['s'] or ''
      out[#out + 1] = h
      bytes = bytes + #h
    end
    read = read + 1
    out[1] = entry[1]
    from = '(' .. entry[1]
    if bytes >= budget then break end
  end
  if #entries == 0 then break end
end
if read >= most or bytes >= budget then out[2] = 1 end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last > 0 then
  local lm = tonumber(string.match(last[1][1], '(%d+)-'))
  if lm > now then out[4] = lm - now end
end
if read == 0 and ARGV[2] ~= '' then
  -- Nothing after the cursor: a stream that ends before it (a failover to a replica that lacked the
  -- last entries, whose new ids may fall below the cursor) or that is gone (a Redis restarted
  -- empty) moves the cursor back: every entry up to its end was read already.
  if #last == 0 then
    out[1] = ''
  else
    local lm, ls = string.match(last[1][1], '(%d+)-(%d+)')
    local cm, cs = string.match(ARGV[2], '(%d+)-(%d+)')
    lm, ls, cm, cs = tonumber(lm), tonumber(ls), tonumber(cm), tonumber(cs)
    if lm < cm or (lm == cm and ls < cs) then out[1] = last[1][1] end
  end
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
  rateLimitExchange: defineScript({
    NUMBER_OF_KEYS: 2,
    SCRIPT: EXCHANGE_SCRIPT,
    parseCommand(parser, keys: [string, string], args: string[]) {
      parser.pushKeys(keys);
      parser.push(...args);
    },
    transformReply: (reply: unknown) => reply,
  }),
};
