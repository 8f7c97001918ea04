-- wrk script of the Worker benchmark's hammer (tests/bench/worker.ts runs it): one caller, named in
-- CF-Connecting-IP (the first argument after `--`), sends the same request on every connection; the
-- answers are counted by status and printed as one line when wrk ends.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  req = wrk.format("GET", wrk.path, { ["CF-Connecting-IP"] = args[1] })
  admitted, refused, other = 0, 0, 0
end

function request()
  return req
end

function response(status, headers, body)
  if status == 200 then
    admitted = admitted + 1
  elseif status == 429 then
    refused = refused + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local a, r, o = 0, 0, 0
  for _, thread in ipairs(threads) do
    a = a + thread:get("admitted")
    r = r + thread:get("refused")
    o = o + thread:get("other")
  end
  io.write(string.format("hammer admitted=%d refused=%d other=%d\n", a, r, o))
end
