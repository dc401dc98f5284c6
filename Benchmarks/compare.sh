#!/usr/bin/env bash
# Two builds of broker-full side by side (issue 35: each gain its own commit with its before and after figure):
# both brokers run at once, each endpoint is measured on one then the other (which goes first alternates), several
# rounds; CPU per request
# from /proc, medians.
#   Benchmarks/compare.sh BEFORE-BINARY AFTER-BINARY [rounds] [seconds-per-measurement]   (default 3 rounds of 6 s)
# e.g. cp .build-bench/release/broker-full /tmp/before; (change, build); Benchmarks/compare.sh /tmp/before .build-bench/release/broker-full
# BEFORE_ENV / AFTER_ENV: a variable (NAME=value) for one side's broker; BEFORE_LABEL / AFTER_LABEL: the table's
# column names (Benchmarks/executor.sh runs one binary both ways through them). BUSY=0: no busy loops beside the
# measurements (Benchmarks/busy.sh; default one per core). BROKER_CPUS / WRK_CPUS: CPU lists (taskset -c) for
# both brokers' threads and for wrk, e.g. BROKER_CPUS=0 WRK_CPUS=1 BUSY=0: the two event loops share one core
# and nothing of theirs crosses between cores.
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/busy.sh
BEFORE=$1
AFTER=$2
ROUNDS=${3:-3}
DURATION=${4:-6}
WORK=$(mktemp -d)
cleanup() {
  for f in "$WORK"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  stop_busy
  rm -rf "$WORK"
}
trap cleanup EXIT

start() {  # start NAME BINARY [NAME=value]
  local name=$1 binary=$2 variable=${3:-}
  mkdir -p "$WORK/$name"
  echo '{"server": {"login_throttle": false, "issuer": "http://127.0.0.1"}}' >"$WORK/$name/broker.json"
  env ${variable:+"$variable"} ${BROKER_CPUS:+taskset -c "$BROKER_CPUS"} "$binary" serve --config "$WORK/$name/broker.json" --port 0 --data-dir "$WORK/$name/data" --log-level error \
    >"$WORK/$name/out" 2>"$WORK/$name/err" &
  echo $! >"$WORK/$name.pid"
  for _ in $(seq 100); do grep -q listening "$WORK/$name/out" 2>/dev/null && break; sleep 0.1; done
  local url access secret
  url=$(sed 's/broker listening on //' "$WORK/$name/out")
  access=$(curl -sf -H 'Content-Type: application/json' \
    -d '{"email": "bench@example.com", "password": "correct horse battery staple"}' "$url/auth/register" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
  secret=$("$binary" client add bench --scope deploy --data-dir "$WORK/$name/data" --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')
  echo "$url $access $(printf 'bench:%s' "$secret" | base64 -w0)" >"$WORK/$name/target"
}
start before "$BEFORE" "${BEFORE_ENV:-}"
start after "$AFTER" "${AFTER_ENV:-}"
start_busy

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The order alternates from round to round: measured one after the other, the second broker of a pair read up
# to 8% cheaper than the first when both were the same binary (an A/A run), which a fixed order would credit to
# the change.
for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
  for endpoint in jwks me mint; do
    for name in $order; do
      read -r url access basic <"$WORK/$name/target"
      pid=$(cat "$WORK/$name.pid")
      case $endpoint in
        # The document through the router (a query sends it there), the HTTP path of every other request; the
        # document as served is answered beneath the router (Benchmarks/floor.sh measures it against nginx).
        jwks) args=("$url/.well-known/jwks.json?via=router") ;;
        me) args=(-H "Authorization: Bearer $access" "$url/auth/me") ;;
        mint) args=(-s Benchmarks/wrk/mint.lua "$url") ;;
      esac
      before=$(ticks "$pid")
      MINT_BASIC=$basic ${WRK_CPUS:+taskset -c "$WRK_CPUS"} wrk -t2 -c16 -d"${DURATION}s" "${args[@]}" >"$WORK/wrk.txt"
      after=$(ticks "$pid")
      if grep -q "Non-2xx\|lua:" "$WORK/wrk.txt"; then echo "compare.sh: $name $endpoint: errors" >&2; cat "$WORK/wrk.txt" >&2; exit 1; fi
      echo "$endpoint $name $(awk '/requests in/ {print $1}' "$WORK/wrk.txt") $((after - before))" >>"$WORK/results"
    done
  done
done

python3 - "$WORK/results" "$DURATION" "$(getconf CLK_TCK)" "$ROUNDS" "${BEFORE_LABEL:-before}" "${AFTER_LABEL:-after}" "$(busy_words)" \
  "${BROKER_CPUS:+, brokers on CPU $BROKER_CPUS}${WRK_CPUS:+, wrk on CPU $WRK_CPUS}" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    endpoint, name, requests, ticks = line.split()
    rows.setdefault((endpoint, name), []).append((int(requests), int(ticks)))
duration, hz = float(sys.argv[2]), int(sys.argv[3])
print(f"medians of {sys.argv[4]} alternating rounds of {sys.argv[2]} s, {sys.argv[7]}{sys.argv[8]}")
print(f"| endpoint | {sys.argv[5]}: req/s | µs CPU/request | {sys.argv[6]}: req/s | µs CPU/request | CPU ratio |")
print("|---|---:|---:|---:|---:|---:|")
for endpoint in ("jwks", "me", "mint"):
    cells, cpu = [], {}
    for name in ("before", "after"):
        samples = rows[(endpoint, name)]
        rate = statistics.median(r / duration for r, _ in samples)
        cpu[name] = statistics.median(t / hz / r * 1e6 for r, t in samples)
        cells += [f"{rate:,.0f}", f"{cpu[name]:.0f}"]
    label = {"jwks": "jwks?via=router"}.get(endpoint, endpoint)
    print(f"| {label} | " + " | ".join(cells) + f" | {cpu['after'] / cpu['before']:.2f}x |")
PY
