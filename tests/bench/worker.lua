-- wrk script of the Worker benchmark (tests/bench/worker.ts runs it): callers in turn (the first
-- argument after `--`, default 1,000), each
-- named in CF-Connecting-IP (the Worker's caller) and X-Forwarded-For (the Deno service's, behind
-- TRUSTED_PROXIES=127.0.0.1), so both count the same callers. Requests are formatted once.

function init(args)
  requests = {}
  local callers = tonumber(args[1] or "1000")
  for i = 0, callers - 1 do
    local ip = string.format("10.0.%d.%d", math.floor(i / 256), i % 256)
    requests[i + 1] = wrk.format("GET", wrk.path, { ["CF-Connecting-IP"] = ip, ["X-Forwarded-For"] = ip })
  end
  n = 0
end

function request()
  n = n % #requests + 1
  return requests[n]
end
