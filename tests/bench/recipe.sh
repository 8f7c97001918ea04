#!/usr/bin/env bash
# The VM recipe's throughput by store: two service instances (`deno run main.ts --listen` with the
# unit's HOSTNAME, PORT and TRUSTED_PROXIES and the compile task's permission flags, its state folder
# mapped to a temporary one, default limit 60 per 60 s)
# behind real nginx from deploy/nginx.conf (loopback ports, one worker), with the upstream's
# balancing as shipped (`hash`) or round robin (`rr`). With `many`, wrk sends each request as one of
# 5,000 callers in X-Forwarded-For and the bench's nginx alone takes the client address from it
# (realip), so that nginx's limit_conn, its hash and the address it forwards are the caller's; with
# `one`, every request is from 127.0.0.1. Fresh processes and KV file per run; each round runs every
# configuration once, in turn. One line per run: round, store, balancing, callers, req/s, p99.
# Run: bash tests/bench/recipe.sh [rounds] [seconds] [stores] [balancing] [callers]
#   stores: memory kv-exact kv-lf<sync ms> sqlite-lf<sync ms> (default "memory kv-exact kv-lf50
#   kv-lf250"); with a `node-` prefix (node-memory, node-sqlite-lf250) the instances are Node's
#   (`lib/node/main.ts`, deploy/discovery-node@.service) on $NODE, or node@24 from npm.
# Needs nginx, wrk and curl; loopback only; stops by itself (each process has a 120 s timeout).
set -uo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
seconds=${2:-4}
stores=${3:-memory kv-exact kv-lf50 kv-lf250}
balancings=${4:-rr hash}
callers_list=${5:-many one}
case $stores in *node-*) NODE=${NODE:-$(npx -y node@24 -p process.execPath)} ;; esac
script=$(mktemp --suffix .lua)
cat >"$script" <<'LUA'
local reqs = {}
init = function()
  for c = 0, 4999 do
    local ip = "10.0." .. math.floor(c / 250) .. "." .. (c % 250 + 1)
    reqs[c] = wrk.format("GET", "/api/v1/platform", { ["X-Forwarded-For"] = ip })
  end
end
request = function() return reqs[math.random(0, 4999)] end
LUA
compile_flags() { # state dir: the permission and unstable flags the compiled binary carries
  deno eval --quiet 'const task = JSON.parse(Deno.readTextFileSync("deno.json")).tasks.compile;
    console.log(task.split(/\s+/).filter((f) => /^--(allow-|unstable-|v8-flags=)/.test(f))
      .map((f) => f.replaceAll("/var/lib/discovery", Deno.args[0]))
      .map((f) => f.startsWith("--allow-read=") ? `${f},.` : f).join(" "));' "$1"
}
free_port() {
  deno eval 'const l = Deno.listen({ hostname: "127.0.0.1", port: 0 }); console.log(l.addr.port); l.close();'
}
nginx_conf() { # dir port upstream1 upstream2 balancing
  local conf
  conf=$(sed -e 's/^user www-data;$//' -e 's/^worker_processes auto;/worker_processes 1;/' \
    -e "s#^pid /run/nginx.pid;#pid $1/nginx.pid;#" \
    -e "s#^error_log /var/log/nginx/error.log warn;#error_log $1/error.log warn;#" \
    -e "s/^        listen 80;/        listen 127.0.0.1:$2;/" -e 's/^        listen \[::\]:80;//' \
    -e "s/server 127.0.0.1:8001 /server 127.0.0.1:$3 /" \
    -e "s/server 127.0.0.1:8002 /server 127.0.0.1:$4 /" \
    -e 's/^    server_tokens off;/    server_tokens off;\n    set_real_ip_from 127.0.0.1;\n    real_ip_header X-Forwarded-For;/' \
    deploy/nginx.conf)
  if [ "$5" = rr ]; then conf=$(sed -e '/^        hash \$binary_remote_addr consistent;$/d' <<<"$conf"); fi
  echo "$conf" >"$1/nginx.conf"
}
run() { # round store balancing callers
  local dir p1 p2 port pids=() store_env=() wrk_script=()
  dir=$(mktemp -d)
  chmod 755 "$dir"
  p1=$(free_port) p2=$(free_port) port=$(free_port)
  case $2 in
    memory) ;;
    kv-exact) store_env=(RATE_LIMIT_STORE=kv KV_PATH="$dir/limits.sqlite3" RATE_LIMIT_CONSISTENCY=exact) ;;
    kv-lf*) store_env=(RATE_LIMIT_STORE=kv KV_PATH="$dir/limits.sqlite3"
      RATE_LIMIT_CONSISTENCY=local-first RATE_LIMIT_SYNC_MS="${2#kv-lf}") ;;
    sqlite-lf* | node-sqlite-lf*) store_env=(RATE_LIMIT_STORE=sqlite SQLITE_PATH="$dir/hits.sqlite3"
      RATE_LIMIT_SYNC_MS="${2#*sqlite-lf}") ;;
  esac
  local service=(deno run $(compile_flags "$dir") main.ts --listen)
  case $2 in node-*) service=("$NODE" lib/node/main.ts) ;; esac
  for p in $p1 $p2; do
    env HOSTNAME=127.0.0.1 PORT="$p" TRUSTED_PROXIES=127.0.0.1,::1 \
      PUBLIC_BASE_URL=https://discovery.example.com "${store_env[@]}" \
      timeout 120 "${service[@]}" >/dev/null 2>"$dir/$p.log" &
    pids+=($!)
  done
  nginx_conf "$dir" "$port" "$p1" "$p2" "$3"
  timeout 120 nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" -g 'daemon off;' &
  pids+=($!)
  for p in $p1 $p2 $port; do
    for _ in $(seq 1 100); do
      curl -s -o /dev/null "http://127.0.0.1:$p/api/v1/platform" && break
      sleep 0.1
    done
  done
  [ "$4" = many ] && wrk_script=(-s "$script")
  wrk -t1 -c16 -d1s "${wrk_script[@]}" "http://127.0.0.1:$port/api/v1/platform" >/dev/null
  local out
  out=$(wrk -t1 -c16 -d"${seconds}s" --latency "${wrk_script[@]}" "http://127.0.0.1:$port/api/v1/platform")
  echo "$1 $2 $3 $4 $(awk '/Requests\/sec/ {print $2}' <<<"$out") req/s, p99 $(awk '$1 == "99%" {print $2}' <<<"$out")"
  kill -QUIT "${pids[2]}"
  kill -TERM "${pids[0]}" "${pids[1]}"
  wait "${pids[@]}" 2>/dev/null
  rm -rf "$dir"
}
for round in $(seq 1 "$rounds"); do
  for callers in $callers_list; do
    for balancing in $balancings; do
      for store in $stores; do run "$round" "$store" "$balancing" "$callers"; done
    done
  done
done
rm -f "$script"
