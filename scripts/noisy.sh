#!/usr/bin/env bash
# Runs the README's test command several times on a noisy machine and prints each run's wall time:
#
#   scripts/noisy.sh quiet [RUNS]              nothing beside it
#   scripts/noisy.sh stress [RUNS]             Debian's stress-ng --cpu 8 beside it
#   scripts/noisy.sh idle-connections [RUNS]   a few hundred idle TCP connections held open to another
#                                              local server (Tests/Interop/idle_connections.py) beside it
#
# RUNS defaults to 3. Exits non-zero if any run failed. The load stops when the script does.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-quiet}
runs=${2:-3}
load_pid=""
cleanup() { if [ -n "$load_pid" ]; then kill "$load_pid" 2>/dev/null || true; wait "$load_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT

case "$mode" in
  quiet) ;;
  stress)
    command -v stress-ng >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; }
    stress-ng --cpu 8 --quiet &
    load_pid=$! ;;
  idle-connections)
    python3 Tests/Interop/idle_connections.py --connections 300 &
    load_pid=$! ;;
  *) echo "usage: scripts/noisy.sh quiet|stress|idle-connections [RUNS]" >&2; exit 64 ;;
esac

failed=0
for run in $(seq "$runs"); do
  started=$(date +%s)
  if scripts/test.sh >"/tmp/broker-noisy-$mode-$run.log" 2>&1; then outcome=passed; else outcome=FAILED; failed=1; fi
  echo "noisy: $mode run $run: $outcome in $(( $(date +%s) - started )) s (log /tmp/broker-noisy-$mode-$run.log)"
done
exit "$failed"
