-- wrk script of the load benchmark (tests/bench/load.ts runs it).
--
-- Arguments after "--": <callers> <accept> <threads>
--   callers  number of distinct X-Forwarded-For addresses cycled through (10.0.0.0/8); 1 = one caller
--   accept   the Accept header value, or "-" for none
--   threads  wrk's -t, so that each thread takes its own share of the callers
-- Every request carries the same headers whatever server it goes to, so the service and the reference
-- servers parse the same bytes. done() prints one line "WRKJSON {...}" for the orchestrator.

local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  callers = tonumber(args[1]) or 262144
  local accept = args[2] or "-"
  local headers = {}
  if accept ~= "-" then headers["Accept"] = accept end
  -- The requests are formatted here, not per request: wrk on its one core must stay well ahead of
  -- the fastest server. Each thread takes its own share of the callers.
  local share = math.max(1, math.floor(callers / (tonumber(args[3]) or 1)))
  local first = (tid or 0) * share
  requests = {}
  for i = 1, (callers == 1 and 1 or share) do
    local n = first + i - 1
    if callers == 1 then
      headers["X-Forwarded-For"] = "10.255.255.255"
    else
      headers["X-Forwarded-For"] = "10." .. math.floor(n / 65536) % 256 .. "." ..
        math.floor(n / 256) % 256 .. "." .. n % 256
    end
    requests[i] = wrk.format("GET", nil, headers)
  end
  count = #requests
  index = 0
end

function request()
  index = index % count + 1
  return requests[index]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"timeout":%d,"non2xx3xx":%d,"p50_us":%d,"p99_us":%d,"mean_us":%.1f,"max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.timeout,
    e.status, latency:percentile(50), latency:percentile(99), latency.mean, latency.max))
end
