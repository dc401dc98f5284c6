#!/usr/bin/env bash
# The HTTP floor (issue "Close to the floor", goal 1): the broker's constant document — `/.well-known/jwks.json`
# — against Debian's nginx serving the very same bytes as a static file, in one run, with the CPU each server
# spent per request (its user + system time from /proc over the requests answered); and the mint and
# `/auth/me` against the constant document plus one ES256 signature or verification (`openssl speed` on one
# core, same run), for goal 2; and refresh grants on SQLite and on PostgreSQL against the constant document
# plus one signature plus the store's own time; and `/auth/me` and the refresh grant with DPoP-bound tokens (a
# proof per request, made ahead by Benchmarks/dpop_proofs.py) against their Bearer twins plus one verification
# (issue "Performance, round four", goal 2). Writes the "The HTTP floor" section of BENCHMARKS.md.
#   Benchmarks/floor.sh [seconds-per-measurement] [rounds]     (default 10 s, 3 rounds)
# Each round measures nginx, Hummingbird, the documents, `/auth/me` and the mint, and `openssl speed`; the table
# shows each figure's median over the rounds, and each ratio's median of the rounds' own ratios (a round's floor
# from that round), with their range: on this VM kind one run's figures move by 10–20% from run to run. The
# refresh grants spend their token chains, so they are measured once, after the rounds.
#   SCRATCH=.build-bench Benchmarks/floor.sh
#   BUSY=0 Benchmarks/floor.sh     (no busy loops beside it: see Benchmarks/busy.sh; default one per core)
# The PostgreSQL cluster comes from scripts/with-postgres.sh (the script runs itself under it).
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/nginx-static.sh
. Benchmarks/busy.sh
if [ -z "${BROKER_TEST_POSTGRES:-}" ]; then exec scripts/with-postgres.sh "$0" "$@"; fi
DURATION=${1:-10}
ROUNDS=${2:-3}
case "$ROUNDS" in '' | *[!0-9]* | 0) echo "floor.sh: rounds must be a whole number above 0, not '$ROUNDS'" >&2; exit 2 ;; esac
SCRATCH=${SCRATCH:-.build}
WORK=$(mktemp -d)
cleanup() {
  kill "$(cat "$WORK/pid" 2>/dev/null)" 2>/dev/null || true
  [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
  kill "$(cat "$WORK/hummingbird.pid" 2>/dev/null)" 2>/dev/null || true
  kill "$(cat "$WORK/pg.pid" 2>/dev/null)" 2>/dev/null || true
  stop_busy
  rm -rf "$WORK"
}
trap cleanup EXIT
export BROKER_DATABASE_PASSWORD=$BROKER_TEST_POSTGRES_PASSWORD PGPASSWORD=$BROKER_TEST_POSTGRES_PASSWORD

swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
swift build -c release --scratch-path "$SCRATCH" --product broker >&2
swift build -c release --scratch-path "$SCRATCH" --product hummingbird-floor >&2
swift build -c release --scratch-path "$SCRATCH" --product broker-bench >&2
BIN=$PWD/$SCRATCH/release/broker
cat >"$WORK/broker.json" <<JSON
{"server": {"login_throttle": false, "issuer": "http://127.0.0.1"}}
JSON
"$BIN" serve --config "$WORK/broker.json" --port 0 --data-dir "$WORK/data" --log-level error >"$WORK/out" 2>"$WORK/err" &
echo $! >"$WORK/pid"
for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed 's/broker listening on //' "$WORK/out")
BROKER_PID=$(cat "$WORK/pid")

# The same bytes, from nginx: two workers (the broker's event loops are one per core), no access log.
mkdir -p "$WORK/www/.well-known"
curl -sf "$URL/.well-known/jwks.json" >"$WORK/www/.well-known/jwks.json"
chmod 755 "$WORK" && chmod -R a+rX "$WORK/www"  # nginx's workers are not root
NGINX_PORT=$(free_port)
static_nginx_conf "$WORK" "$NGINX_PORT" "worker_processes $(nproc);" >"$WORK/nginx.conf"
nginx -c "$WORK/nginx.conf"
for _ in $(seq 100); do [ -s "$WORK/nginx.pid" ] && break; sleep 0.1; done
NGINX_PIDS="$(cat "$WORK/nginx.pid") $(pgrep -P "$(cat "$WORK/nginx.pid")" | tr '\n' ' ')"

# The same bytes from Hummingbird with nothing of ours (Benchmarks/Sources/hummingbird-floor): the framework's
# own floor, so the table shows how much of the broker's constant document is the broker.
HB_PORT=$(free_port)
"$PWD/$SCRATCH/release/hummingbird-floor" "$HB_PORT" "$WORK/www/.well-known/jwks.json" >"$WORK/hb.out" 2>&1 &
echo $! >"$WORK/hummingbird.pid"
for _ in $(seq 100); do grep -q listening "$WORK/hb.out" 2>/dev/null && break; sleep 0.1; done

# Every measurement from here on runs beside the busy loops; so do the set-up steps between them (the
# registration, the client, the logins that make the refresh chains), which are not measured.
start_busy
BUSY_WORDS=$(busy_words)

# post URL PATH JSON
post() { curl -sf -H 'Content-Type: application/json' -d "$3" "$1$2"; }
ACCESS=$(post "$URL" /auth/register '{"email": "bench@example.com", "password": "correct horse battery staple"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
SECRET=$("$BIN" client add bench --scope deploy --data-dir "$WORK/data" --json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')
export MINT_BASIC
MINT_BASIC=$(printf 'bench:%s' "$SECRET" | base64 -w0)
# A DPoP-bound session, as the CLI's: the sign-in sent a proof by this key, so its tokens are bound to it.
export DPOP_KEY=$WORK/dpop.pem DPOP_THREADS=2
python3 Benchmarks/dpop_proofs.py key "$DPOP_KEY"
# login_dpop URL: a sign-in with a proof; prints its answer (JSON).
login_dpop() {
  curl -sf -H 'Content-Type: application/json' -H "DPoP: $(python3 Benchmarks/dpop_proofs.py one "$DPOP_KEY" POST \
    http://127.0.0.1/auth/login)" -d '{"email": "bench@example.com", "password": "correct horse battery staple"}' \
    "$1/auth/login"
}
ACCESS_DPOP=$(login_dpop "$URL" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
# proofs NAME METHOD PATH [ath]: proofs for a DPoP measurement, half as many again as its Bearer twin (NAME's row
# in this round) answered, made just before it (a proof is good for five minutes).
proofs() {
  local count
  count=$(awk -v name="$1" -v round="$ROUND" '$1 == name && $4 == round {print int($2 * 1.5) + 1000}' "$WORK/results")
  python3 Benchmarks/dpop_proofs.py many "$DPOP_KEY" "$2" "http://127.0.0.1$3" "$count" "$WORK/proofs" ${4:-}
}

# CPU ticks (user + system) of a set of processes.
ticks() { for pid in "$@"; do awk '{print $14 + $15}' "/proc/$pid/stat"; done | awk '{s += $1} END {print s}'; }
# measure NAME PIDS -- wrk arguments…: requests answered and CPU ticks spent by PIDS meanwhile (in round ROUND).
ROUND=1
measure() {
  local name=$1 pids=$2
  shift 3
  local before after
  before=$(ticks $pids)
  wrk -t2 -c16 -d"${DURATION}s" "$@" >"$WORK/$name.txt"
  after=$(ticks $pids)
  if grep -q "Non-2xx\|lua:" "$WORK/$name.txt"; then echo "floor.sh: $name: errors" >&2; cat "$WORK/$name.txt" >&2; exit 1; fi
  local requests
  requests=$(awk '/requests in/ {print $1}' "$WORK/$name.txt")
  echo "$name $requests $((after - before)) $ROUND" >>"$WORK/results"
}
for ROUND in $(seq "$ROUNDS"); do
  measure nginx "$NGINX_PIDS" -- "http://127.0.0.1:$NGINX_PORT/.well-known/jwks.json"
  measure hummingbird "$(cat "$WORK/hummingbird.pid")" -- "http://127.0.0.1:$HB_PORT/.well-known/jwks.json"
  measure jwks "$BROKER_PID" -- "$URL/.well-known/jwks.json"
  # The same document with a query goes through the router, as every other request does: the floor of goal 2.
  measure jwks_router "$BROKER_PID" -- "$URL/.well-known/jwks.json?via=router"
  measure me "$BROKER_PID" -- -H "Authorization: Bearer $ACCESS" "$URL/auth/me"
  ACCESS=$ACCESS_DPOP proofs me GET /auth/me ath
  ACCESS=$ACCESS_DPOP DPOP_MODE=me DPOP_PROOFS=$WORK/proofs measure me_dpop "$BROKER_PID" -- -s Benchmarks/wrk/dpop.lua "$URL"
  measure mint "$BROKER_PID" -- -s Benchmarks/wrk/mint.lua "$URL"
  # One signature's and one verification's cost on one core, in the same round.
  openssl speed -seconds 3 ecdsap256 2>/dev/null |
    awk -v round="$ROUND" '/256 bits ecdsa \(nistp256\)/ {print "speed", $(NF-1), $NF, round}' >>"$WORK/results"
done
ROUND=1

# Refresh grants. Each connection spends its own chain (Benchmarks/wrk/refresh.lua): 8 per wrk thread plus two
# spare, from logins.
chains() {
  : >"$2"
  for _ in $(seq 20); do
    post "$1" /auth/login '{"email": "bench@example.com", "password": "correct horse battery staple"}' |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["refresh_token"])' >>"$2"
  done
}
export TOKENS_PER_THREAD=10
chains "$URL" "$WORK/tokens-sqlite"
export REFRESH_TOKENS="$WORK/tokens-sqlite"
measure refresh_sqlite "$BROKER_PID" -- -s Benchmarks/wrk/refresh.lua "$URL"
# The same with DPoP-bound chains: each grant carries a proof by the session's key.
for _ in $(seq 20); do
  login_dpop "$URL" | python3 -c 'import json,sys; print(json.load(sys.stdin)["refresh_token"])'
done >"$WORK/tokens-dpop"
proofs refresh_sqlite POST /auth/token
REFRESH_TOKENS=$WORK/tokens-dpop DPOP_MODE=refresh DPOP_PROOFS=$WORK/proofs \
  measure refresh_dpop "$BROKER_PID" -- -s Benchmarks/wrk/dpop.lua "$URL"
# SQLite's own CPU for a refresh grant's store call, alone in a process on one core (broker-bench: one rotation
# at a time on a WAL file, every thread's CPU counted).
"$PWD/$SCRATCH/release/broker-bench" 2 | awk '/^sqlite_rotate_refresh_token/ {print "store_sqlite", $2}' >>"$WORK/results"

# The same on PostgreSQL: a broker on a database of the throw-away cluster; the CPU of every process of the
# cluster is the store's own time, and counts in the grant's cost beside the broker's.
psql -qAtX "$BROKER_TEST_POSTGRES" -c "CREATE DATABASE broker_floor"
head -c 32 /dev/urandom | base64 >"$WORK/master.key"
chmod 600 "$WORK/master.key"
"$BIN" serve --config "$WORK/broker.json" --port 0 --database "${BROKER_TEST_POSTGRES%/*}/broker_floor" \
  --master-key-file "$WORK/master.key" --log-level error >"$WORK/pg.out" 2>"$WORK/pg.err" &
echo $! >"$WORK/pg.pid"
for _ in $(seq 300); do grep -q listening "$WORK/pg.out" 2>/dev/null && break; sleep 0.1; done
PG_URL=$(sed 's/broker listening on //' "$WORK/pg.out")
post "$PG_URL" /auth/register '{"email": "bench@example.com", "password": "correct horse battery staple"}' >/dev/null
chains "$PG_URL" "$WORK/tokens-pg"
# CPU ticks of every process of the cluster: user + system, and the postmaster's reaped children's.
cluster_ticks() {
  for pid in $(pgrep -x postgres); do awk '{print $14 + $15 + $16 + $17}' "/proc/$pid/stat" 2>/dev/null; done |
    awk '{s += $1} END {print s}'
}
before_db=$(cluster_ticks)
export REFRESH_TOKENS="$WORK/tokens-pg"
measure refresh_pg "$(cat "$WORK/pg.pid")" -- -s Benchmarks/wrk/refresh.lua "$PG_URL"
after_db=$(cluster_ticks)
echo "database_pg 0 $((after_db - before_db)) 1" >>"$WORK/results"

python3 - "$WORK/results" "$ROUNDS" "$DURATION" "$(getconf CLK_TCK)" "${BUSY:-}" "$BUSY_WORDS" <<'PY' | python3 Benchmarks/write_section.py "## The HTTP floor"
import datetime, statistics, subprocess, sys
# rows[name][round] = (requests, ticks); speed[round] = (signatures/s, verifications/s)
rows = {}
speed = {}
store = {}
for line in open(sys.argv[1]):
    fields = line.split()
    if fields[0] == "store_sqlite":
        store["sqlite"] = 1e6 / float(fields[1])
    elif fields[0] == "speed":
        speed[int(fields[3])] = (float(fields[1]), float(fields[2]))
    else:
        rows.setdefault(fields[0], {})[int(fields[3])] = (int(fields[1]), int(fields[2]))
rounds = int(sys.argv[2])
duration, hz = float(sys.argv[3]), int(sys.argv[4])
def rate_in(name, r): return rows[name][r][0] / duration
def cpu_in(name, r): return rows[name][r][1] / hz / rows[name][r][0] * 1e6
def rate(name): return statistics.median(rate_in(name, r) for r in rows[name])
def cpu_us(name): return statistics.median(cpu_in(name, r) for r in rows[name])
sign_us = statistics.median(1e6 / s for s, _ in speed.values())
verify_us = statistics.median(1e6 / v for _, v in speed.values())
def ratio(values, unit=""):
    """The median of the rounds' own ratios, in bold, and their range when there are several."""
    values = sorted(values)
    text = f"**{statistics.median(values):.2f}{unit}**"
    return text + (f" ({values[0]:.2f}{unit}–{values[-1]:.2f}{unit})" if len(values) > 1 else "")
# Each round's floor from that round: its routed document and its own signature or verification.
mint_ratios = [(cpu_in("jwks_router", r) + 1e6 / speed[r][0]) / cpu_in("mint", r) for r in range(1, rounds + 1)]
me_ratios = [(cpu_in("jwks_router", r) + 1e6 / speed[r][1]) / cpu_in("me", r) for r in range(1, rounds + 1)]
# DPoP (goal 2 of "Performance, round four"): the Bearer twin of the same round plus one verification (the proof's).
me_dpop_ratios = [(cpu_in("me", r) + 1e6 / speed[r][1]) / cpu_in("me_dpop", r) for r in range(1, rounds + 1)]
jwks_ratios = [rate_in("jwks", r) / rate_in("nginx", r) for r in range(1, rounds + 1)]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
nginx = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip().replace("nginx version: ", "")
routed = cpu_us("jwks_router")
floor_mint = routed + sign_us
floor_me = routed + verify_us
database_us = rows["database_pg"][1][1] / hz / rows["refresh_pg"][1][0] * 1e6
floor_sqlite = routed + sign_us + store["sqlite"]
floor_pg = routed + sign_us + database_us
# The same floors from the document as it is served (beneath the router).
def served(floor): return floor - routed + cpu_us("jwks")
actual_pg = cpu_us("refresh_pg") + database_us
floor_me_dpop = cpu_us("me") + verify_us
floor_refresh_dpop = cpu_us("refresh_sqlite") + verify_us
print(f"""## The HTTP floor: the constant document against nginx (wrk, CPU per request from /proc)

Command: `{f"BUSY={sys.argv[5]} " if sys.argv[5] else ""}Benchmarks/floor.sh {sys.argv[3]} {rounds}` — {datetime.date.today()}, {cpu}, release build, {nginx}, wrk -t2 -c16, servers and wrk on the same cores, {sys.argv[6]} (`Benchmarks/busy.sh`); CPU per request is the server's user + system time over the requests it answered; one ES256 signature {sign_us:.0f} µs and verification {verify_us:.0f} µs (`openssl speed ecdsap256`, one core, each round). Figures are medians of {rounds} rounds; a bold ratio is the median of the rounds' own ratios, its range after it; the refresh rows are one measurement after the rounds.

| measurement | req/s | CPU per request | against | ratio | goal | against the document as served |
|---|---:|---:|---|---:|---:|---:|
| nginx, the same 216-byte file | {rate("nginx"):,.0f} | {cpu_us("nginx"):.0f} µs | — | — | — | — |
| Hummingbird alone, the same bytes (`hummingbird-floor`) | {rate("hummingbird"):,.0f} | {cpu_us("hummingbird"):.0f} µs | nginx's req/s | {rate("hummingbird") / rate("nginx"):.2f}x | — | — |
| broker `GET /.well-known/jwks.json` (answered beneath the router) | {rate("jwks"):,.0f} | {cpu_us("jwks"):.0f} µs | nginx's req/s | {ratio(jwks_ratios, "x")} | ≥ 0.7x | — |
| broker `GET /.well-known/jwks.json?via=router` (the same through the router) | {rate("jwks_router"):,.0f} | {routed:.0f} µs | nginx's req/s | {rate("jwks_router") / rate("nginx"):.2f}x | — | — |
| broker `client_credentials` mint | {rate("mint"):,.0f} | {cpu_us("mint"):.0f} µs | the routed document + one signature: {floor_mint:.0f} µs | {ratio(mint_ratios)} | ≥ 0.8 | {served(floor_mint) / cpu_us("mint"):.2f} |
| broker `GET /auth/me` | {rate("me"):,.0f} | {cpu_us("me"):.0f} µs | the routed document + one verification: {floor_me:.0f} µs | {ratio(me_ratios)} | ≥ 0.85 | {served(floor_me) / cpu_us("me"):.2f} |
| broker refresh grant, SQLite | {rate("refresh_sqlite"):,.0f} | {cpu_us("refresh_sqlite"):.0f} µs | the routed document + one signature + the store's own time ({store["sqlite"]:.0f} µs): {floor_sqlite:.0f} µs | **{floor_sqlite / cpu_us("refresh_sqlite"):.2f}** | — | {served(floor_sqlite) / cpu_us("refresh_sqlite"):.2f} |
| broker refresh grant, PostgreSQL | {rate("refresh_pg"):,.0f} | {cpu_us("refresh_pg"):.0f} µs + the database's {database_us:.0f} µs | the routed document + one signature + the database's CPU: {floor_pg:.0f} µs | **{floor_pg / actual_pg:.2f}** | ≥ 0.7 | {served(floor_pg) / actual_pg:.2f} |
| broker `GET /auth/me`, DPoP-bound | {rate("me_dpop"):,.0f} | {cpu_us("me_dpop"):.0f} µs | its Bearer twin + one verification: {floor_me_dpop:.0f} µs | {ratio(me_dpop_ratios)} | ≥ 0.8 | — |
| broker refresh grant, SQLite, DPoP-bound | {rate("refresh_dpop"):,.0f} | {cpu_us("refresh_dpop"):.0f} µs | its Bearer twin + one verification: {floor_refresh_dpop:.0f} µs | **{floor_refresh_dpop / cpu_us("refresh_dpop"):.2f}** | ≥ 0.8 | — |

The constant documents (the signing keys and the discovery document) are answered on the connection's event
loop, beneath Hummingbird's router (`ConstantDocumentHandler`): the same bytes, request id, log line and metrics,
without a task, the router or the middlewares' awaits. Every other request goes through the router, so goal 2's
floor is the same document through the router (a query sends it there): the HTTP path those requests take. The
last column reads the same ratios against the document as it is served, which shows what the router's way
itself costs every routed request. The mint and `/auth/me` rows are floor ÷ actual CPU per request: 1.0 would be
no work beyond the routed HTTP path and the one cryptographic operation the request cannot avoid. The Hummingbird
row is the framework with nothing of ours on the same event loops: the broker's routed document costs
{routed - cpu_us("hummingbird"):.0f} µs more than it (the request id, the log line's decision, the metrics, the
look-up of a DPoP field, the route table).
The refresh rows: SQLite's own time is the CPU of the grant's one store call (spend the token, store its
successor) alone in a process, one at a time (`broker-bench`, same run); PostgreSQL's is the CPU of every process
of the cluster per grant, which the grant's cost then includes (broker + database).
The DPoP rows send the CLI's kind of token: bound to a key (`cnf.jkt`), each request with a proof of its own by
that key (`Benchmarks/dpop_proofs.py`, made before the measurement). What a proof adds is its verification and
its replay check (the `jti` looked up, then written once the request is accepted); the floor is the Bearer row of
the same round plus one verification, so 1.0 would be a replay check that costs nothing.
""", end="")
PY
