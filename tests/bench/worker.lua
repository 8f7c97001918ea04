-- wrk script of the Worker benchmark (tests/bench/worker.ts runs it): 1,000 callers in turn, each
-- named in CF-Connecting-IP (the Worker's caller) and X-Forwarded-For (the Deno service's, behind
-- TRUSTED_PROXIES=127.0.0.1), so both count the same callers. Requests are formatted once.

function init(args)
  requests = {}
  for i = 0, 999 do
    local ip = string.format("10.0.%d.%d", math.floor(i / 256), i % 256)
    requests[i + 1] = wrk.format("GET", wrk.path, { ["CF-Connecting-IP"] = ip, ["X-Forwarded-For"] = ip })
  end
  n = 0
end

function request()
  n = n % #requests + 1
  return requests[n]
end
