#!/usr/bin/env bash
# Soak: SECONDS (default 60) of mixed traffic against one release `broker serve` (SQLite) — logins, refresh
# chains, /auth/me, client_credentials mints and the JWKS, one wrk each, all at once — sampling the broker's
# private (anonymous) memory and open descriptors once a second. Passes when nothing but 2xx and 429 was
# answered and both are flat: the last 10 s's peak within 10 % (and 2 MB / 8 descriptors) of the first 10 s's.
# Writes the "Soak" section of BENCHMARKS.md.
#   Benchmarks/soak.sh [seconds]        BROKER_BUILD_PATH picks the build folder (default .build)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-60}
SCRATCH=${BROKER_BUILD_PATH:-.build}
WORK=$(mktemp -d)
trap 'kill $(cat "$WORK/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$WORK"' EXIT

swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
BIN=$SCRATCH/release/broker-full
"$BIN" serve --port 0 --data-dir "$WORK/data" --log-level error >"$WORK/out" 2>"$WORK/err" &
echo $! >"$WORK/pid"
PID=$(cat "$WORK/pid")
for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed 's/broker listening on //' "$WORK/out")
PASSWORD="correct horse battery staple"
BODY="{\"email\": \"soak@example.com\", \"password\": \"$PASSWORD\"}"
curl -sf -H 'Content-Type: application/json' -d "$BODY" "$URL/auth/register" >/dev/null
login() { curl -sf -H 'Content-Type: application/json' -d "$BODY" "$URL/auth/login"; }
ACCESS=$(login | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
for _ in $(seq 12); do login | python3 -c 'import json,sys; print(json.load(sys.stdin)["refresh_token"])' >>"$WORK/tokens"; done
SECRET=$("$BIN" client add soak --scope deploy --data-dir "$WORK/data" --json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')
BASIC=$(printf 'soak:%s' "$SECRET" | base64 -w0)

# One sample a second: elapsed seconds, RssAnon kB, open descriptors.
(
  start=$(date +%s)
  while kill -0 "$PID" 2>/dev/null; do
    echo "$(($(date +%s) - start)) $(awk '/RssAnon/ {print $2}' /proc/"$PID"/status) $(ls /proc/"$PID"/fd | wc -l)"
    sleep 1
  done
) >"$WORK/samples" 2>/dev/null &
SAMPLER=$!

TRAFFIC=()
SOAK_METHOD=POST SOAK_PATH=/auth/login SOAK_CONTENT_TYPE=application/json SOAK_BODY=$BODY \
  wrk -t1 -c2 -d"${DURATION}s" --timeout 30s -s Benchmarks/wrk/soak.lua "$URL" >"$WORK/login.txt" 2>&1 &
TRAFFIC+=($!)
REFRESH_TOKENS=$WORK/tokens TOKENS_PER_THREAD=12 \
  wrk -t1 -c4 -d"${DURATION}s" --timeout 30s -s Benchmarks/wrk/soak.lua "$URL" >"$WORK/refresh.txt" 2>&1 &
TRAFFIC+=($!)
SOAK_PATH=/auth/me SOAK_AUTHORIZATION="Bearer $ACCESS" \
  wrk -t1 -c4 -d"${DURATION}s" --timeout 30s -s Benchmarks/wrk/soak.lua "$URL" >"$WORK/me.txt" 2>&1 &
TRAFFIC+=($!)
SOAK_METHOD=POST SOAK_PATH=/auth/token SOAK_CONTENT_TYPE=application/x-www-form-urlencoded \
  SOAK_BODY="grant_type=client_credentials&ttl=300" SOAK_AUTHORIZATION="Basic $BASIC" \
  wrk -t1 -c4 -d"${DURATION}s" --timeout 30s -s Benchmarks/wrk/soak.lua "$URL" >"$WORK/mint.txt" 2>&1 &
TRAFFIC+=($!)
SOAK_PATH=/.well-known/jwks.json \
  wrk -t1 -c2 -d"${DURATION}s" --timeout 30s -s Benchmarks/wrk/soak.lua "$URL" >"$WORK/jwks.txt" 2>&1 &
TRAFFIC+=($!)
wait "${TRAFFIC[@]}"
kill "$SAMPLER" 2>/dev/null || true

python3 - "$WORK" "$DURATION" <<'PY' | python3 Benchmarks/write_section.py "## Soak"
import datetime, re, sys
work, duration = sys.argv[1], int(sys.argv[2])
rows, failed = [], False
for kind in ["login", "refresh", "me", "mint", "jwks"]:
    text = open(f"{work}/{kind}.txt").read()
    found = re.search(r"soak ok=(\d+) limited=(\d+) errors=(\d+) last_error=(.*)", text)
    if not found or "Socket errors" in text:
        sys.exit(f"soak: wrk {kind} did not finish cleanly:\n{text}")
    ok, limited, errors = (int(found.group(i)) for i in (1, 2, 3))
    failed |= errors > 0
    rows.append(f"| {kind} | {ok:,} | {limited:,} | {errors:,} | {found.group(4).strip() or '—'} |")
samples = [tuple(int(x) for x in line.split()) for line in open(f"{work}/samples") if len(line.split()) == 3]
first = [s for s in samples if s[0] < 10]
last = [s for s in samples if s[0] >= duration - 10]
mem_first, mem_last = max(s[1] for s in first), max(s[1] for s in last)
fd_first, fd_last = max(s[2] for s in first), max(s[2] for s in last)
mem_flat = mem_last <= max(mem_first * 1.10, mem_first + 2048)
fd_flat = fd_last <= max(fd_first * 1.10, fd_first + 8)
failed |= not (mem_flat and fd_flat)
table = "\n".join(rows)
print(f"""## Soak: mixed traffic (wrk, SQLite store)

Command: `Benchmarks/soak.sh {duration}` — {datetime.date.today()}, release build, five wrk processes at once
(logins 2 connections, refresh chains 4, `/auth/me` 4, mints 4, JWKS 2) for {duration} s.

| traffic | 2xx | 429 | other | last other |
|---|---:|---:|---:|---|
{table}

| sampled once a second | peak, first 10 s | peak, last 10 s | flat (≤ +10 %) |
|---|---:|---:|---|
| private (anonymous) memory | {mem_first / 1024:.1f} MB | {mem_last / 1024:.1f} MB | {"yes" if mem_flat else "**no**"} |
| open descriptors | {fd_first} | {fd_last} | {"yes" if fd_flat else "**no**"} |

Result: **{"fail" if failed else "pass"}**.
Most of the private memory is scrypt's: each hash at N=2^17, r=8 works in 128 MiB, and the hashing pool runs
one per core while logins arrive. Flat means no growth from the first ten seconds to the last: no leak per
request, no descriptor left open.
""", end="")
if failed:
    sys.exit("soak: failed (see the section above)")
PY
