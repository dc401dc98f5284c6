#!/usr/bin/env bash
# Scale-out benchmarks: the release `broker serve` on SQLite, on PostgreSQL with one broker, and on PostgreSQL
# with two brokers sharing the database, beside pgbench (TPC-B-like and -S) on the same throw-away cluster in
# the same run; writes the "Scale-out" section of BENCHMARKS.md.
#   Benchmarks/postgres.sh [seconds-per-measurement [rounds]]     (default 10 seconds, 5 rounds)
# Rounds interleave: each measures every configuration once (SQLite, one PostgreSQL broker, two, pgbench), so a
# ratio is taken within a round, between measurements minutes apart at most; the section gives each goal's
# median ratio over the rounds and its range, as this shared machine's speed drifts between minutes.
# BROKER_BUILD_PATH picks the build folder (default .build). The cluster comes from scripts/with-postgres.sh
# (fsync and synchronous_commit off, as for the tests: pgbench runs under the same settings).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BROKER_TEST_POSTGRES:-}" ]; then exec scripts/with-postgres.sh "$0" "$@"; fi
DURATION=${1:-10}
ROUNDS=${2:-5}
CORES=$(nproc)
SCRATCH=${BROKER_BUILD_PATH:-.build}
WORK=$(mktemp -d)
PIDS=()
stop_brokers() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  PIDS=()
}
trap 'stop_brokers; rm -rf "$WORK"' EXIT

swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
BIN=$SCRATCH/release/broker-full
export BROKER_DATABASE_PASSWORD=$BROKER_TEST_POSTGRES_PASSWORD PGPASSWORD=$BROKER_TEST_POSTGRES_PASSWORD
SERVER_URL=${BROKER_TEST_POSTGRES%/*}
psql -qAtX "$BROKER_TEST_POSTGRES" -c "CREATE DATABASE broker_bench" -c "CREATE DATABASE pgbench"
head -c 32 /dev/urandom | base64 >"$WORK/master.key"
chmod 600 "$WORK/master.key"
cat >"$WORK/broker.json" <<JSON
{"server": {"login_throttle": false, "issuer": "http://127.0.0.1", "registrations_per_hour": 100000}}
JSON

# start NAME [serve options…]: a release broker in the background; its URL is in $WORK/NAME.url, its process
# id in $WORK/NAME.pid.
start() {
  local name=$1
  shift
  "$BIN" serve --config "$WORK/broker.json" --port 0 --log-level error "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PIDS+=($!)
  echo $! >"$WORK/$name.pid"
  for _ in $(seq 300); do grep -q listening "$WORK/$name.out" 2>/dev/null && break; sleep 0.1; done
  sed 's/broker listening on //' "$WORK/$name.out" >"$WORK/$name.url"
}
# cpu PID|postgres…: CPU seconds (user + system) the processes and their exited children have used so far;
# `postgres` stands for every process of the cluster (the postmaster, whose reaped backends count, and the live
# backends).
cpu() {
  python3 - "$@" <<'PY'
import os, sys
pids = []
for arg in sys.argv[1:]:
    if arg != "postgres":
        pids.append(arg)
        continue
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == "postgres":
                pids.append(pid)
        except OSError:
            pass
total = 0
for pid in pids:
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        # utime, stime, and cutime, cstime: the postmaster's waited-for children (backends that have exited)
        total += sum(int(field) for field in fields[11:15])
    except OSError:
        pass
print(total / os.sysconf("SC_CLK_TCK"))
PY
}
post() { curl -sf -H 'Content-Type: application/json' -d "$2" "$1$3"; }
rate() { awk '/Requests\/sec/ {print $2}' "$1"; }
checked() {
  if grep -q "Non-2xx\|Socket errors\|\.lua:" "$1"; then echo "wrk: errors in $1" >&2; cat "$1" >&2; exit 1; fi
}

# measure LABEL CLIENT_OPTIONS BROKER…: each kind of request against every named broker at once (one wrk per
# broker, the 16 connections split between them); the rates add up. Writes "kind rate requests broker-CPU
# database-CPU" lines into $WORK/result-LABEL; the CPU is the named brokers' and the cluster's.
measure() {
  local label=$1 client=$2
  shift 2
  local urls=() brokers=() name count=$#
  for name in "$@"; do
    urls+=("$(cat "$WORK/$name.url")")
    brokers+=("$(cat "$WORK/$name.pid")")
  done
  local connections=$((16 / count)) threads=$((2 / count > 0 ? 2 / count : 1))
  : >"$WORK/result-$label"
  post "${urls[0]}" '{"email": "bench@example.com", "password": "correct horse battery staple"}' /auth/register \
    >/dev/null 2>&1 || true
  local access
  access=$(post "${urls[0]}" '{"email": "bench@example.com", "password": "correct horse battery staple"}' /auth/login |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
  local per=$((connections / threads + 2))
  local index=0
  for url in "${urls[@]}"; do
    : >"$WORK/tokens-$label-$index"
    for _ in $(seq $((per * threads))); do
      post "$url" '{"email": "bench@example.com", "password": "correct horse battery staple"}' /auth/login |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["refresh_token"])' >>"$WORK/tokens-$label-$index"
    done
    index=$((index + 1))
  done
  local secret
  secret=$("$BIN" client add "bench-$label" --scope deploy $client --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')
  export MINT_BASIC
  MINT_BASIC=$(printf 'bench-%s:%s' "$label" "$secret" | base64 -w0)
  sleep 1
  local kind
  for kind in me refresh mint jwks login; do
    local pids=() index=0 broker_before pg_before
    broker_before=$(cpu "${brokers[@]}")
    pg_before=$(cpu postgres)
    for url in "${urls[@]}"; do
      local out="$WORK/$label-$kind-$index.txt"
      case $kind in
      me) wrk -t"$threads" -c"$connections" -d"${DURATION}s" -H "Authorization: Bearer $access" "$url/auth/me" >"$out" & ;;
      refresh)
        REFRESH_TOKENS="$WORK/tokens-$label-$index" TOKENS_PER_THREAD=$per \
          wrk -t"$threads" -c"$connections" -d"${DURATION}s" -s Benchmarks/wrk/refresh.lua "$url" >"$out" &
        ;;
      mint) wrk -t"$threads" -c"$connections" -d"${DURATION}s" -s Benchmarks/wrk/mint.lua "$url" >"$out" & ;;
      jwks) wrk -t"$threads" -c"$connections" -d"${DURATION}s" "$url/.well-known/jwks.json" >"$out" & ;;
      login) wrk -t1 -c$((4 / count)) -d"${DURATION}s" -s Benchmarks/wrk/login.lua "$url/auth/login" >"$out" & ;;
      esac
      pids+=($!)
      index=$((index + 1))
    done
    wait "${pids[@]}"
    local broker_cpu pg_cpu total=0 requests=0
    broker_cpu=$(python3 -c "print($(cpu "${brokers[@]}") - $broker_before)")
    pg_cpu=$(python3 -c "print($(cpu postgres) - $pg_before)")
    for index in $(seq 0 $((count - 1))); do
      checked "$WORK/$label-$kind-$index.txt"
      total=$(python3 -c "print($total + $(rate "$WORK/$label-$kind-$index.txt"))")
      requests=$((requests + $(awk '/requests in/ {print $1}' "$WORK/$label-$kind-$index.txt")))
    done
    echo "$kind $total $requests $broker_cpu $pg_cpu" >>"$WORK/result-$label"
  done
}

DB=$SERVER_URL/broker_bench
PGB=$SERVER_URL/pgbench
start sqlite --data-dir "$WORK/sqlite"
start pg1 --database "$DB" --master-key-file "$WORK/master.key"
start pg2 --database "$DB" --master-key-file "$WORK/master.key"
pgbench -q -i -s 10 "$PGB" >/dev/null 2>&1
for round in $(seq "$ROUNDS"); do
  echo "== round $round of $ROUNDS: SQLite, one broker" >&2
  measure "sqlite-$round" "--data-dir $WORK/sqlite" sqlite
  echo "== round $round of $ROUNDS: PostgreSQL, one broker" >&2
  measure "pg1-$round" "--database $DB --master-key-file $WORK/master.key" pg1
  echo "== round $round of $ROUNDS: PostgreSQL, two brokers" >&2
  measure "pg2x-$round" "--database $DB --master-key-file $WORK/master.key" pg1 pg2
  echo "== round $round of $ROUNDS: pgbench" >&2
  before=$(cpu postgres)
  pgbench -c 16 -j 2 -T "$DURATION" "$PGB" >"$WORK/tpcb.txt" 2>/dev/null
  tpcb_cpu=$(python3 -c "print($(cpu postgres) - $before)")
  tps=$(awk '/^tps/ {print $3; exit}' "$WORK/tpcb.txt")
  processed=$(awk '/number of transactions actually processed/ {print $NF; exit}' "$WORK/tpcb.txt" | cut -d/ -f1)
  select=$(pgbench -S -c 16 -j 2 -T "$DURATION" "$PGB" 2>/dev/null | awk '/^tps/ {print $3; exit}')
  echo "$tps $processed $tpcb_cpu $select" >"$WORK/pgbench-$round"
done
stop_brokers
PG_VERSION=$(psql -qAtX "$BROKER_TEST_POSTGRES" -c "SHOW server_version")

python3 - "$WORK" "$ROUNDS" "$DURATION" "$CORES" "$PG_VERSION" <<'PY' | python3 Benchmarks/write_section.py "## Scale-out"
import datetime, statistics, sys
work, rounds, duration, cores, version = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
configs = ("sqlite", "pg1", "pg2x")
# rates[config][kind]: the rate in each round; used[config][kind]: [requests, broker CPU s, database CPU s],
# summed over the rounds (CPU per request is read over every round together).
rates = {c: {} for c in configs}
used = {c: {} for c in configs}
for config in configs:
    for r in range(1, rounds + 1):
        for line in open(f"{work}/result-{config}-{r}"):
            kind, rate, requests, broker, database = line.split()
            rates[config].setdefault(kind, []).append(float(rate))
            total = used[config].setdefault(kind, [0.0, 0.0, 0.0])
            for i, value in enumerate((requests, broker, database)):
                total[i] += float(value)
tpcb, select, tpcb_count, tpcb_cpu = [], [], 0.0, 0.0
for r in range(1, rounds + 1):
    tps, processed, cpu_s, select_tps = open(f"{work}/pgbench-{r}").read().split()
    tpcb.append(float(tps)); select.append(float(select_tps))
    tpcb_count += float(processed); tpcb_cpu += float(cpu_s)
median = statistics.median
def rate(config, kind):
    return median(rates[config][kind])
def ratios(top, bottom):
    """The ratio within each round: lists of per-round values."""
    return [a / b for a, b in zip(top, bottom)]
def spread(values):
    return f"{min(values):.2f}x–{max(values):.2f}x" if len(values) > 1 else "one round"
def cpu_us(config, kind, which):
    requests, broker, database = used[config][kind]
    return (broker if which == "broker" else database) / requests * 1e6
def both_us(config, kind):
    return cpu_us(config, kind, "broker") + cpu_us(config, kind, "postgres")
def cpu_row(name, kind):
    cells = [f"{cpu_us('sqlite', kind, 'broker'):,.0f}", f"{cpu_us('pg1', kind, 'broker'):,.0f}",
             f"{cpu_us('pg1', kind, 'postgres'):,.0f}", f"{both_us('pg1', kind):,.0f}",
             f"{cpu_us('pg2x', kind, 'broker'):,.0f}"]
    return f"| {name} | " + " | ".join(cells) + " |"
tpcb_us = tpcb_cpu / tpcb_count * 1e6
rotation_us = cpu_us('pg1', 'refresh', 'postgres')
goals = {
    "refresh": ratios(rates["pg1"]["refresh"], tpcb),
    "me": ratios(rates["pg1"]["me"], rates["sqlite"]["me"]),
    "mint": ratios(rates["pg2x"]["mint"], rates["pg1"]["mint"]),
}
def verdict(values, goal):
    middle = median(values)
    if min(values) >= goal:
        word = "**met**" + (" in every round" if len(values) > 1 else "")
    elif middle >= goal:
        word = "**met** by the median, not in every round"
    else:
        word = "**not met**"
    return f"median {middle:.2f}x, goal ≥ {goal}x: {word}"
def more_or_less(difference):
    return f"{abs(difference):,.0f} µs " + ("more" if difference >= 0 else "less")
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
def row(name, kind):
    one = median(ratios(rates["pg1"][kind], rates["sqlite"][kind]))
    two = median(ratios(rates["pg2x"][kind], rates["pg1"][kind]))
    return (f"| {name} | {rate('sqlite', kind):,.1f} | {rate('pg1', kind):,.1f} | {rate('pg2x', kind):,.1f} "
            f"| {one:.2f}x | {two:.2f}x |")
print(f"""## Scale-out: SQLite, PostgreSQL, two brokers (wrk, pgbench)

Command: `Benchmarks/postgres.sh {duration} {rounds}` — {datetime.date.today()}, {cpu}, {cores} cores shared by the
brokers, PostgreSQL {version} and wrk, release build; the cluster is scripts/with-postgres.sh's (fsync and
synchronous_commit off, for the brokers and pgbench alike). {rounds} interleaved rounds of {duration} s per
measurement: each round measures SQLite, one PostgreSQL broker, two, and pgbench, so every ratio is taken within
a round, and a rate or ratio below is the median of the rounds.

| req/s (median of {rounds} rounds) | SQLite, 1 broker | PostgreSQL, 1 broker | PostgreSQL, 2 brokers | PG ÷ SQLite | 2 ÷ 1 broker |
|---|---:|---:|---:|---:|---:|
{row("`GET /auth/me` (verify + session read)", "me")}
{row("refresh grant (rotation + sign)", "refresh")}
{row("`client_credentials` mint", "mint")}
{row("`POST /auth/login` (scrypt)", "login")}
{row("HTTP ceiling: `GET /.well-known/jwks.json`", "jwks")}

| goal | measured (median) | ratio (median) | the rounds | goal | the same in CPU per request |
|---|---:|---:|---:|---:|---:|
| refresh grants/s on PostgreSQL vs `pgbench` TPC-B-like tps (16 clients, scale 10) | {rate('pg1', 'refresh'):,.0f} vs {median(tpcb):,.0f} | **{median(goals['refresh']):.2f}x** | {spread(goals['refresh'])} | ≥ 1.0x | {tpcb_us / rotation_us:.2f}x (database) |
| `/auth/me` on PostgreSQL vs on SQLite | {rate('pg1', 'me'):,.0f} vs {rate('sqlite', 'me'):,.0f} | **{median(goals['me']):.2f}x** | {spread(goals['me'])} | ≥ 0.8x | {both_us('sqlite', 'me') / both_us('pg1', 'me'):.2f}x |
| mints with two brokers vs one | {rate('pg2x', 'mint'):,.0f} vs {rate('pg1', 'mint'):,.0f} | **{median(goals['mint']):.2f}x** | {spread(goals['mint'])} | ≥ 1.6x | {2 * both_us('pg1', 'mint') / both_us('pg2x', 'mint'):.2f}x (on cores of their own) |
| (for reference) the same goal in the database's CPU: µs per TPC-B-like transaction vs per rotation (what the database alone could sustain) | {tpcb_us:,.0f} vs {rotation_us:,.0f} | {tpcb_us / rotation_us:.2f}x | — | — | — |
| (for reference) `pgbench -S` select-only tps | {median(select):,.0f} | — | — | — | — |

"The rounds" is the lowest and highest of the per-round ratios. The last column reads each goal in CPU instead
of rate, over all rounds together, which leaves out wrk's share of the cores and a run's idle moments (though CPU
per request, too, rises when the machine is busy): the database's CPU per TPC-B-like transaction over its CPU
per rotation; SQLite's CPU per request (the broker) over PostgreSQL's (broker and database); and twice a mint's
CPU with one broker over its CPU with two, which is what two brokers would reach with cores of their own (2.00x
if a second broker made no request dearer; each of two brokers batches fewer reads per query, as it sees half
the load).

Where the two cores went: CPU time per answered request (user + system, from `/proc`, over every round),
in microseconds; PostgreSQL's is every process of the cluster.

| µs of CPU per request | SQLite: broker | PostgreSQL: broker | PostgreSQL: database | PostgreSQL: both | 2 brokers: brokers |
|---|---:|---:|---:|---:|---:|
{cpu_row("`GET /auth/me`", "me")}
{cpu_row("refresh grant", "refresh")}
{cpu_row("`client_credentials` mint", "mint")}
{cpu_row("HTTP ceiling: JWKS", "jwks")}
| `pgbench` TPC-B-like transaction (the database alone) | — | — | {tpcb_us:,.0f} | — | — |

wrk: 16 connections in all (2 threads; with two brokers one wrk per broker, 8 connections each, rates added),
each refresh connection spending its own token chain; logins 4 connections in all. Every response was checked.
All three configurations' brokers run for the whole benchmark; each measurement counts the CPU of the brokers
it loads.

**Goals.** Two cores are shared by wrk, the broker(s) and PostgreSQL, and every row is CPU-bound, so each rate
is the inverse of the CPU its request costs everyone (the table above):
- *Refresh grants vs TPC-B* ({verdict(goals['refresh'], 1.0)}). A TPC-B-like transaction costs the database
  {tpcb_us:,.0f} µs of CPU; a rotation costs it {rotation_us:,.0f} µs, in one statement
  (lock the token and its session, then spend it and insert its successor, or revoke the session on reuse,
  through data-modifying `WITH` clauses). So the database alone could rotate
  {tpcb_us / rotation_us:.2f}x as many tokens as it runs TPC-B transactions; the broker
  spends another {cpu_us('pg1', 'refresh', 'broker'):,.0f} µs per grant on the same cores (HTTP, two SHA-256s, the
  ES256 signature, the JSON answer, PostgresNIO), work pgbench does not have beside its database.
- *`/auth/me` on PostgreSQL vs SQLite* ({verdict(goals['me'], 0.8)}). Session reads that arrive while one
  is in flight are sent together, as one query (`WHERE s.id = ANY($1)`), when it answers; a lone read goes at
  once. Under this load that costs the database {cpu_us('pg1', 'me', 'postgres'):,.0f} µs per request, and the
  broker {more_or_less(cpu_us('pg1', 'me', 'broker') - cpu_us('sqlite', 'me', 'broker'))} than with SQLite's
  in-process read (PostgresNIO's encoding and decoding, the pool's lease and the hand-offs between NIO's event
  loop and Swift's executor, against SQLite's own work and GRDB's queue). In CPU, what the goal compares, a request
  on SQLite costs {both_us('sqlite', 'me') / both_us('pg1', 'me'):.2f}x of one on PostgreSQL (broker and
  database). Both stores read the session, its user and the password account's address confirmation in one query.
- *Two brokers vs one* ({verdict(goals['mint'], 1.6)}). The HTTP ceiling itself does not rise with a
  second broker, so on this machine the ratio measures the machine, not the broker: the second broker needs
  cores of its own. The CPU per mint is the measure that carries over: the last column beside the second
  (what each mint cost the brokers, two of them or one) shows whether a second broker makes each request
  dearer (contention) or not, which is what decides how brokers on cores of their own add up.
""", end="")
PY
