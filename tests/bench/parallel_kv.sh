#!/usr/bin/env bash
# `deno serve --parallel` (two workers) on one Deno KV file at saturation, once per consistency:
# wrk for 6 s (after 2 s of warm-up) from 5,000 callers under a limit none reaches, the default
# 100 ms store timeout. Prints requests per second, the failure-policy incidents and the requests
# they answered (exact; a lone failed call outside an incident is not logged, so not counted), and
# the sync incidents (local-first). Loopback only; stops by itself.
# Run: bash tests/bench/parallel_kv.sh (needs wrk and curl; about 30 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
script=$(mktemp --suffix .lua)
cat >"$script" <<'LUA'
request = function()
  local c = math.random(0, 4999)
  local ip = "10.0." .. math.floor(c / 250) .. "." .. (c % 250 + 1)
  return wrk.format("GET", "/api/v1/platform", { ["X-Forwarded-For"] = ip })
end
LUA
for mode in exact local-first; do
  dir=$(mktemp -d)
  port=$((20000 + RANDOM % 10000))
  RATE_LIMIT_STORE=kv KV_PATH="$dir/kv.sqlite3" RATE_LIMIT_CONSISTENCY=$mode RATE_LIMIT=1000 \
    TRUSTED_PROXIES=127.0.0.1 ACCESS_LOG=false DENO_JOBS=2 PUBLIC_BASE_URL=http://localhost \
    timeout 60 deno serve --parallel --port "$port" --host 127.0.0.1 --allow-net --allow-read \
    --allow-write --allow-env main.ts >"$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/api/v1/platform" && break
    sleep 0.2
  done
  warm=$(wrk -t1 -c32 -d2s -s "$script" "http://127.0.0.1:$port")
  out=$(wrk -t1 -c32 -d6s -s "$script" "http://127.0.0.1:$port")
  kill -INT "$pid"
  wait "$pid" 2>/dev/null || true
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  # Incidents span the warm-up too: count its requests with the run's.
  total=$(grep -hoE '[0-9]+ requests in' <(echo "$warm") <(echo "$out") | awk '{s += $1} END {print s}')
  incidents=$(grep -c '"rate-limit store unavailable' "$dir/log" || true)
  policy=$({ grep -oE '"answeredByPolicy":[0-9]+' "$dir/log" || true; } | awk -F: '{s += $2} END {print s + 0}')
  unsynced=$(grep -c 'rate-limit sync failing' "$dir/log" || true)
  echo "$mode: $rps requests/s; of $total requests (warm-up and run), $policy answered in $incidents failure-policy incidents; sync incidents $unsynced"
  rm -rf "$dir"
done
rm -f "$script"
