#!/bin/sh
# The load benchmark (tests/bench/load.ts): installs wrk from Debian if it is missing, then runs the
# service, its ceiling and a bare server on one core and wrk on the other, against 127.0.0.1 only.
# Arguments are passed on, e.g.: sh tests/bench/load.sh --rounds 3 --duration 5 --access-log both
set -eu
if ! command -v wrk >/dev/null 2>&1; then
  echo "wrk is missing: installing it from Debian" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq wrk
fi
command -v taskset >/dev/null 2>&1 || { echo "taskset (util-linux) is required" >&2; exit 1; }
cd "$(dirname "$0")/../.."
# Bounded in any case: rounds and duration are capped by load.ts; this is a last resort.
exec timeout 1800 deno run --allow-run --allow-net=127.0.0.1 --allow-read --allow-env \
  --allow-write=.bench tests/bench/load.ts "$@"
