#!/usr/bin/env bash
# Builds of broker-full side by side on the PostgreSQL refresh grant (issue 35): each binary a broker on its own
# database of one throw-away cluster (scripts/with-postgres.sh), measured in turn (the order alternates between
# rounds), wrk -t2 -c16 spending one refresh chain per connection; prints each round's grants, the broker's CPU
# and the whole cluster's CPU per grant (user + system from /proc).
#   Benchmarks/compare-postgres.sh ROUNDS SECONDS BINARY…
# e.g. cp .build-bench/release/broker-full /tmp/before; (change, build); Benchmarks/compare-postgres.sh 5 8 /tmp/before .build-bench/release/broker-full
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BROKER_TEST_POSTGRES:-}" ]; then exec scripts/with-postgres.sh "$0" "$@"; fi
ROUNDS=$1
SECS=$2
shift 2
WORK=$(mktemp -d)
trap 'for f in $WORK/*.pid; do kill $(cat $f) 2>/dev/null || true; done; rm -rf $WORK' EXIT
export BROKER_DATABASE_PASSWORD=$BROKER_TEST_POSTGRES_PASSWORD PGPASSWORD=$BROKER_TEST_POSTGRES_PASSWORD
head -c 32 /dev/urandom | base64 >"$WORK/master.key"; chmod 600 "$WORK/master.key"
echo '{"server": {"login_throttle": false, "issuer": "http://127.0.0.1"}}' >"$WORK/broker.json"
post() { curl -sf -H 'Content-Type: application/json' -d "$3" "$1$2"; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
cluster_ticks() { for pid in $(pgrep -x postgres); do awk '{print $14 + $15 + $16 + $17}' "/proc/$pid/stat" 2>/dev/null; done | awk '{s += $1} END {print s}'; }
i=0
for BIN in "$@"; do
  psql -qAtX "$BROKER_TEST_POSTGRES" -c "CREATE DATABASE ab$i"
  BIN=$(realpath "$BIN")
  "$BIN" serve --config "$WORK/broker.json" --port 0 --database "${BROKER_TEST_POSTGRES%/*}/ab$i" \
    --master-key-file "$WORK/master.key" --log-level error >"$WORK/$i.out" 2>"$WORK/$i.err" &
  echo $! >"$WORK/$i.pid"
  for _ in $(seq 300); do grep -q listening "$WORK/$i.out" 2>/dev/null && break; sleep 0.1; done
  sed 's/broker listening on //' "$WORK/$i.out" >"$WORK/$i.url"
  post "$(cat $WORK/$i.url)" /auth/register '{"email": "bench@example.com", "password": "correct horse battery staple"}' >/dev/null
  i=$((i + 1))
done
export TOKENS_PER_THREAD=10
for round in $(seq "$ROUNDS"); do
  order=$(seq 0 $((i - 1))); [ $((round % 2)) = 0 ] && order=$(seq $((i - 1)) -1 0)
  for j in $order; do
    url=$(cat "$WORK/$j.url"); : >"$WORK/tokens"
    for _ in $(seq 20); do
      post "$url" /auth/login '{"email": "bench@example.com", "password": "correct horse battery staple"}' |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["refresh_token"])' >>"$WORK/tokens"
    done
    export REFRESH_TOKENS=$WORK/tokens
    b=$(ticks "$(cat $WORK/$j.pid)"); d=$(cluster_ticks)
    wrk -t2 -c16 -d"${SECS}s" -s Benchmarks/wrk/refresh.lua "$url" >"$WORK/wrk.txt"
    b2=$(ticks "$(cat $WORK/$j.pid)"); d2=$(cluster_ticks)
    n=$(awk '/requests in/ {print $1}' "$WORK/wrk.txt")
    grep -q "Non-2xx\|lua:" "$WORK/wrk.txt" && { echo errors; cat "$WORK/wrk.txt"; }
    echo "$j round $round: $n req, broker $(( (b2 - b) * 10000 / n )) µs, db $(( (d2 - d) * 10000 / n )) µs"
  done
done
