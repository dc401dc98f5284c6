#!/usr/bin/env bash
# Apps' sign-in benchmark: wrk against `POST /auth/token` with grant_type=authorization_code on the release
# `broker serve` (SQLite store): each request authenticates the app, spends a code, starts a session and signs
# an ES256 access token and an RS256 id token. Beside it, `openssl speed rsa2048` sign/s on one core, measured
# in the same run; writes the "Apps: authorization codes" section of BENCHMARKS.md.
#   Benchmarks/authcode.sh [seconds]     (default 8; the codes are made just before and live 60 s)
#   BROKER_SCRATCH=.build-release Benchmarks/authcode.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-8}
CORES=$(nproc)
THREADS=2
WORK=$(mktemp -d)
trap 'kill $(cat "$WORK/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$WORK"' EXIT

# BROKER_SCRATCH: a build folder of its own (e.g. .build-release), so that a debug build can run beside it.
SCRATCH=${BROKER_SCRATCH:-.build}
swift build -c release --scratch-path "$SCRATCH" --product broker >&2
swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
BIN=$SCRATCH/release/broker
"$BIN" serve --port 0 --data-dir "$WORK/data" --log-level error >"$WORK/out" 2>"$WORK/err" &
echo $! >"$WORK/pid"
for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed 's/broker listening on //' "$WORK/out")
REDIRECT="https://bench.example/callback"
SECRET=$("$BIN" client add bench --first-party --redirect-uri "$REDIRECT" --data-dir "$WORK/data" --json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')
curl -sf -H 'Content-Type: application/json' -d '{"email":"bench@example.com","password":"correct horse battery staple"}' \
  "$URL/auth/register" >/dev/null
# Enough codes for the run at several times the rate seen on this machine; each works once, for 60 s.
python3 Benchmarks/authcode_codes.py "$URL" "$REDIRECT" bench@example.com "correct horse battery staple" 12000 \
  "$WORK/codes"
export APP_BASIC AUTHCODE_FILE="$WORK/codes" AUTHCODE_THREADS=$THREADS
APP_BASIC=$(printf 'bench:%s' "$SECRET" | base64 -w0)
export APP_REDIRECT_ENCODED
APP_REDIRECT_ENCODED=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$REDIRECT")

wrk -t"$THREADS" -c16 -d"${DURATION}s" -s Benchmarks/wrk/authcode.lua "$URL" >"$WORK/authcode.txt"
if grep -q "Non-2xx\|authcode.lua:" "$WORK/authcode.txt"; then
  echo "wrk authcode: errors" >&2
  cat "$WORK/authcode.txt" >&2
  exit 1
fi
GRANTS=$(awk '/Requests\/sec/ {print $2}' "$WORK/authcode.txt")
LATENCY=$(awk '/Latency/ {print $2; exit}' "$WORK/authcode.txt")
RSA=$(openssl speed -seconds 3 rsa2048 2>/dev/null | awk '/^rsa 2048 bits/ {print $(NF-1)}')
ECDSA=$(openssl speed -seconds 3 ecdsap256 2>/dev/null | awk '/256 bits ecdsa \(nistp256\)/ {print $(NF-1)}')

python3 - "$GRANTS" "$RSA" "$ECDSA" "$CORES" "$DURATION" "$LATENCY" <<'PY' | python3 Benchmarks/write_section.py "## Apps: authorization codes"
import datetime, subprocess, sys
grants, rsa, ecdsa = (float(x) for x in sys.argv[1:4])
cores, duration, latency = int(sys.argv[4]), sys.argv[5], sys.argv[6]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
openssl = subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip()
both = 1 / (1 / rsa + 1 / ecdsa)
print(f"""## Apps: authorization codes with an RS256 id token (wrk, SQLite store)

Command: `Benchmarks/authcode.sh {duration}` — {datetime.date.today()}, {cpu}, {cores} cores shared by the server and wrk, {openssl}, release build.

| measurement | broker | baseline (same run) | ratio |
|---|---:|---:|---:|
| `POST /auth/token` `authorization_code` grants/s (an app, Basic auth, a code spent, a session started, an ES256 access token and an RS256 id token signed; mean latency {latency}) | {grants:,.0f} | `openssl speed rsa2048` sign/s, 1 core: {rsa:,.0f} | **{grants / rsa:.2f}x** |
| the same against one RSA-2048 and one ECDSA P-256 signature per grant, 1 core | {grants:,.0f} | {both:,.0f} | {grants / both:.2f}x |

A grant costs two signatures (the id token's RSA-2048 dominates), a client-secret hash, and a write
transaction (the code spent, the session and its refresh token). On {cores} shared cores wrk and the server
compete for the same CPU, so the ratio against one core's signing rate is what carries over.
""", end="")
PY
