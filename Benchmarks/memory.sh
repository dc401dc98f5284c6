#!/usr/bin/env bash
# Memory (issue "Performance, round four", goal 4): a SQLite broker's resident memory idle, under load, and with
# 100,000 live sessions, and its high-water mark against the bound password hashing sets (the hashing pool's
# workers × scrypt's memory). Writes the "Memory" section of BENCHMARKS.md.
#   Benchmarks/memory.sh [seconds-of-load] [sessions]     (default 20 s and 100000)
#   SCRATCH=.build-bench Benchmarks/memory.sh
# Every figure comes from /proc/PID/status: VmRSS (resident), RssAnon (of which private: the heap, stacks and
# scrypt's buffers; the rest are the binary's and libraries' pages, shared and clean) and VmHWM (the peak of
# VmRSS since the start). Under load VmRSS is sampled ten times a second and its peak kept.
set -euo pipefail
cd "$(dirname "$0")/.."
LOAD=${1:-20}
SESSIONS=${2:-100000}
case "$LOAD$SESSIONS" in '' | *[!0-9]*) echo "memory.sh: seconds and sessions must be whole numbers" >&2; exit 2 ;; esac
SCRATCH=${SCRATCH:-.build}
WORK=$(mktemp -d)
cleanup() {
  kill "$(cat "$WORK/pid" 2>/dev/null)" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
swift build -c release --scratch-path "$SCRATCH" --product broker-bench >&2
BIN=$PWD/$SCRATCH/release/broker-full
cat >"$WORK/broker.json" <<JSON
{"server": {"login_throttle": false, "issuer": "http://127.0.0.1"}}
JSON
"$BIN" serve --config "$WORK/broker.json" --port 0 --data-dir "$WORK/data" --log-level error >"$WORK/out" 2>"$WORK/err" &
echo $! >"$WORK/pid"
PID=$(cat "$WORK/pid")
for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed 's/broker listening on //' "$WORK/out")

# status FIELD: the field of the broker's /proc status, in kB.
status() { awk -v field="$1:" '$1 == field {print $2}' "/proc/$PID/status"; }
# record NAME: the resident, private and peak memory now, as a row of the results.
record() { echo "$1 $(status VmRSS) $(status RssAnon) $(status VmHWM)" >>"$WORK/results"; }
# peak NAME COMMAND…: runs COMMAND while sampling VmRSS ten times a second; records the peak seen as NAME.
peak() {
  local name=$1 highest=0 rss
  shift
  "$@" &
  local job=$!
  while kill -0 "$job" 2>/dev/null; do
    rss=$(status VmRSS)
    [ "$rss" -gt "$highest" ] && highest=$rss
    sleep 0.1
  done
  wait "$job"
  echo "$name $highest $(status RssAnon) $(status VmHWM)" >>"$WORK/results"
}
post() { curl -sf -H 'Content-Type: application/json' -d "$3" "$1$2"; }
ACCOUNT='{"email": "bench@example.com", "password": "correct horse battery staple"}'

# Idle: started, nothing asked yet (the signing keys made, the store opened), then settled.
sleep 5
record idle
# The first password hash: scrypt's 128 MiB, on one of the hashing pool's threads.
export ACCESS MINT_BASIC
ACCESS=$(post "$URL" /auth/register "$ACCOUNT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
sleep 5
record after_first_hash
SECRET=$("$BIN" client add bench --scope deploy --data-dir "$WORK/data" --json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')
MINT_BASIC=$(printf 'bench:%s' "$SECRET" | base64 -w0)

# Under load: `/auth/me` and mints at once, each from its own wrk (8 connections each), for LOAD seconds.
load() {
  wrk -t1 -c8 -d"${LOAD}s" -H "Authorization: Bearer $ACCESS" "$URL/auth/me" >"$WORK/me.txt" &
  wrk -t1 -c8 -d"${LOAD}s" -s Benchmarks/wrk/mint.lua "$URL" >"$WORK/mint.txt"
  wait
}
peak under_load load
sleep 5
record after_load
REQUESTS=$(cat "$WORK/me.txt" "$WORK/mint.txt" | awk '/requests in/ {s += $1} END {print s}')

# 100,000 live sessions, started through the store call a sign-in makes (broker-bench), beside the running broker.
"$PWD/$SCRATCH/release/broker-bench" sessions "$WORK/data/broker.sqlite3" bench@example.com "$SESSIONS" "$WORK/tokens"
record sessions_stored
# Every one of them used: a refresh grant per session, each on rows no request before it touched.
export REFRESH_TOKENS=$WORK/tokens SESSION_THREADS=2
SPAN=$((SESSIONS / 2000 + 5))
peak sessions_used wrk -t2 -c16 -d"${SPAN}s" -s Benchmarks/wrk/sessions.lua "$URL" >"$WORK/sessions.txt"
sleep 5
record after_sessions
SPENT=$(sed -n 's/^sessions.lua: \([0-9]*\) first.*/\1/p' "$WORK/sessions.txt")
DATABASE_KB=$(du -sk "$WORK/data" | awk '{print $1}')

# Password sign-ins from four connections at once: the hashing pool's workers each hash in 128 MiB.
peak logins wrk -t1 -c4 -d10s -s Benchmarks/wrk/login.lua "$URL/auth/login" >"$WORK/logins.txt"
LOGINS=$(awk '/requests in/ {print $1}' "$WORK/logins.txt")
sleep 5
record after_logins
WORKERS=$(nproc)

python3 - "$WORK/results" "$LOAD" "$SESSIONS" "$REQUESTS" "$SPENT" "$DATABASE_KB" "$LOGINS" "$WORKERS" <<'PY' |
import datetime, sys
rows = {}
for line in open(sys.argv[1]):
    name, rss, anon, hwm = line.split()
    rows[name] = (int(rss) / 1024, int(anon) / 1024, int(hwm) / 1024)
load, sessions, requests, spent, database_kb, logins, workers = sys.argv[2:9]
sessions, workers = int(sessions), int(workers)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
scrypt = 128 * 8 * (1 << 17) / 2**20  # MiB for one hash at N=2^17, r=8
bound = rows["after_sessions"][0] + workers * scrypt
def row(label, name, what="resident"):
    rss, anon, hwm = rows[name]
    return f"| {label} | {rss:.1f} MiB{' (peak)' if what == 'peak' else ''} | {anon:.1f} MiB | {hwm:.1f} MiB |"
print(f"""## Memory: idle, under load, 100,000 sessions (SQLite store)

Command: `Benchmarks/memory.sh {load} {sessions}` — {datetime.date.today()}, {cpu}, {workers} cores, release build (`broker-full`, the server), SQLite store, from `/proc/<pid>/status`: resident (VmRSS), of which private (RssAnon), and the peak since the start (VmHWM), in MiB.

| moment | resident | of which private | peak since start |
|---|---:|---:|---:|
{row("idle, 5 s after start", "idle")}
{row("after the first password hash (a registration)", "after_first_hash")}
{row(f"under load: `/auth/me` and mints, 16 connections, {load} s ({int(requests):,} requests)", "under_load", "peak")}
{row("5 s after the load", "after_load")}
{row(f"{sessions:,} live sessions stored", "sessions_stored")}
{row(f"each of them used once: {int(spent):,} refresh grants, each on another session", "sessions_used", "peak")}
{row("5 s after", "after_sessions")}
{row(f"password sign-ins from 4 connections, 10 s ({int(logins):,} sign-ins)", "logins", "peak")}
{row("5 s after", "after_logins")}

The store on disk with {sessions:,} sessions (and the grants' successors): {int(database_kb) / 1024:.0f} MiB.

| beside | idle | per 100,000 sessions |
|---|---:|---:|
| broker (this run) | {rows["idle"][0]:.0f} MiB | {(rows["sessions_used"][0] - rows["after_load"][0]) * 100_000 / sessions:+.0f} MiB resident (the sessions live in the store; what grows is SQLite's page cache, bounded per connection) |
| Keycloak (published sizing guide: "Concepts for sizing CPU and memory resources") | 1,000 MB | +500 MB |
| Rauthy (its README: memory "below 100 MB") | < 100 MB | — |

The peak since start is password hashing's: scrypt at N = 2^17, r = 8 works in {scrypt:.0f} MiB, on each of the hashing
pool's threads (`server.password_hash_workers`, default one per core: {workers} here) while sign-ins arrive; the
buffer is a mapping of its own, returned when the hash ends ({rows["after_logins"][0]:.0f} MiB resident 5 s after the
sign-ins). Already at the start the peak holds one hash (the broker hashes once to time its dummy verification
for unknown addresses). So the high-water mark is bounded by the resident figure before the sign-ins plus
workers × {scrypt:.0f} MiB: {bound:.0f} MiB here; measured {rows["logins"][2]:.1f} MiB. Keycloak's and Rauthy's figures are
their own published ones on their own hardware and in their own units, not measured here.
""", end="")
PY
  python3 Benchmarks/write_section.py "## Memory"
