#!/usr/bin/env bash
# Swift concurrency's own thread pool against NIO's event loops as its global executor (the default since
# issue "Close to the floor"): the same release binary run both ways (BROKER_CONCURRENCY_EXECUTOR=dispatch or
# not), each endpoint measured in alternation, several rounds, CPU per request from /proc and the medians.
#   Benchmarks/executor.sh [rounds] [seconds-per-measurement]     (default 3 rounds of 6 s)
#   SCRATCH=.build-bench Benchmarks/executor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
DURATION=${2:-6}
SCRATCH=${SCRATCH:-.build}
WORK=$(mktemp -d)
cleanup() {
  for f in "$WORK"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
BIN=$PWD/$SCRATCH/release/broker-full

start() {  # start MODE: a broker with that executor; sets URL_<MODE>, PID_<MODE>
  local mode=$1
  mkdir -p "$WORK/$mode"
  echo '{"server": {"login_throttle": false, "issuer": "http://127.0.0.1"}}' >"$WORK/$mode/broker.json"
  BROKER_CONCURRENCY_EXECUTOR=$mode "$BIN" serve --config "$WORK/$mode/broker.json" --port 0 \
    --data-dir "$WORK/$mode/data" --log-level error >"$WORK/$mode/out" 2>"$WORK/$mode/err" &
  echo $! >"$WORK/$mode.pid"
  for _ in $(seq 100); do grep -q listening "$WORK/$mode/out" 2>/dev/null && break; sleep 0.1; done
}
start dispatch
start nio

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for mode in dispatch nio; do
  url=$(sed 's/broker listening on //' "$WORK/$mode/out")
  access=$(curl -sf -H 'Content-Type: application/json' -d '{"email": "bench@example.com", "password": "correct horse battery staple"}' \
    "$url/auth/register" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
  secret=$("$BIN" client add bench --scope deploy --data-dir "$WORK/$mode/data" --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')
  echo "$url $access $(printf 'bench:%s' "$secret" | base64 -w0)" >"$WORK/$mode/target"
done

for round in $(seq "$ROUNDS"); do
  for endpoint in jwks me mint; do
    for mode in dispatch nio; do
      read -r url access basic <"$WORK/$mode/target"
      pid=$(cat "$WORK/$mode.pid")
      case $endpoint in
        jwks) args=("$url/.well-known/jwks.json") ;;
        me) args=(-H "Authorization: Bearer $access" "$url/auth/me") ;;
        mint) args=(-s Benchmarks/wrk/mint.lua "$url") ;;
      esac
      before=$(ticks "$pid")
      MINT_BASIC=$basic wrk -t2 -c16 -d"${DURATION}s" "${args[@]}" >"$WORK/wrk.txt"
      after=$(ticks "$pid")
      if grep -q "Non-2xx\|lua:" "$WORK/wrk.txt"; then echo "executor.sh: $mode $endpoint: errors" >&2; cat "$WORK/wrk.txt" >&2; exit 1; fi
      echo "$endpoint $mode $(awk '/requests in/ {print $1}' "$WORK/wrk.txt") $((after - before))" >>"$WORK/results"
    done
  done
done

python3 - "$WORK/results" "$DURATION" "$(getconf CLK_TCK)" "$ROUNDS" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    endpoint, mode, requests, ticks = line.split()
    rows.setdefault((endpoint, mode), []).append((int(requests), int(ticks)))
duration, hz = float(sys.argv[2]), int(sys.argv[3])
print(f"Benchmarks/executor.sh {sys.argv[4]} {sys.argv[2]}: medians of {sys.argv[4]} alternating rounds")
print("| endpoint | Swift's pool: req/s | µs CPU/request | NIO's loops: req/s | µs CPU/request | CPU ratio |")
print("|---|---:|---:|---:|---:|---:|")
for endpoint in ("jwks", "me", "mint"):
    cells = []
    cpu = {}
    for mode in ("dispatch", "nio"):
        samples = rows[(endpoint, mode)]
        rate = statistics.median(r / duration for r, _ in samples)
        cpu[mode] = statistics.median(t / hz / r * 1e6 for r, t in samples)
        cells += [f"{rate:,.0f}", f"{cpu[mode]:.0f}"]
    print(f"| {endpoint} | " + " | ".join(cells) + f" | {cpu['nio'] / cpu['dispatch']:.2f}x |")
PY
