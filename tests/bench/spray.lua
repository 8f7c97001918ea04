-- wrk script of the spray benchmark (tests/bench/spray.ts runs it): each request comes from a new
-- IPv6 /64 caller (X-Forwarded-For 2001:db8:<hi>:<lo>::1), each caller sends one request, and each
-- thread stops once it has had the answers for its share of the callers.
--
-- Arguments after "--": <callers> <threads>

local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  local callers = tonumber(args[1]) or 1000000
  local count = tonumber(args[2]) or 1
  share = math.floor(callers / count)
  first = (tid or 0) * share
  sent = 0
  answered = 0
end

function request()
  local n = first + sent
  sent = sent + 1
  return wrk.format("GET", nil, {
    ["Accept"] = "application/json",
    ["X-Forwarded-For"] = string.format("2001:db8:%x:%x::1", math.floor(n / 65536), n % 65536),
  })
end

function response(status, headers, body)
  answered = answered + 1
  if answered == share then
    -- wrk's main thread sleeps out -d whatever the threads do: the benchmark times the spray by
    -- this line and then interrupts wrk, which prints its summary.
    io.write("WRKSTOP\n")
    io.flush()
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"p99_us":%d,"max_us":%d,"non2xx3xx":%d,"errors":%d}\n',
    summary.requests, summary.duration, latency:percentile(99), latency.max, e.status,
    e.connect + e.read + e.write + e.timeout))
end
