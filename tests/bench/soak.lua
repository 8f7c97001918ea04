-- wrk script of the soak benchmark (tests/bench/soak.ts runs it, one wrk run per row of its report).
--
-- Arguments after "--": <callers> <threads> <offset> <hot> <hot_every>
--   callers    distinct X-Forwarded-For addresses cycled through (10.0.0.0/10), each thread its share
--   threads    wrk's -t, so that each thread takes its own share of the callers
--   offset     where in its share each thread starts (the previous run's requests per thread), so
--              that consecutive runs continue the cycle instead of starting it again
--   hot        hot callers (10.255.255.0 and up), each soon over the limit and refused
--   hot_every  one request in this many comes from a hot caller (0: none)
-- done() prints one line "WRKJSON {...}" for the orchestrator.

local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  local callers = tonumber(args[1]) or 262144
  local share = math.max(1, math.floor(callers / (tonumber(args[2]) or 1)))
  local first = (tid or 0) * share
  local headers = { ["Accept"] = "application/json" }
  -- Formatted once, not per request: wrk on its one core must stay ahead of the service.
  requests = {}
  for i = 1, share do
    local n = first + i - 1
    headers["X-Forwarded-For"] = "10." .. math.floor(n / 65536) % 256 .. "." ..
      math.floor(n / 256) % 256 .. "." .. n % 256
    requests[i] = wrk.format("GET", "/api/v1/platform", headers)
  end
  hot = {}
  for i = 1, (tonumber(args[4]) or 0) do
    headers["X-Forwarded-For"] = "10.255.255." .. (i - 1)
    hot[i] = wrk.format("GET", "/api/v1/platform", headers)
  end
  hot_every = tonumber(args[5]) or 0
  count = #requests
  index = (tonumber(args[3]) or 0) % count
  sent = 0
end

function request()
  sent = sent + 1
  if hot_every > 0 and #hot > 0 and sent % hot_every == 0 then
    return hot[(sent / hot_every) % #hot + 1]
  end
  index = index % count + 1
  return requests[index]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"timeout":%d,"non2xx3xx":%d,"p50_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.timeout,
    e.status, latency:percentile(50), latency:percentile(99), latency.max))
end
