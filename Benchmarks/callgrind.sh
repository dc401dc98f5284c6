#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind (issue "Close to the floor", goal 3): the same
# binary given the same requests executes the same instructions on a busy machine or a quiet one, so a change
# that costs instructions shows on any machine, unlike req/s. For the constant document (JWKS), `GET /auth/me`,
# a client_credentials mint and a refresh grant, each sent N times over one keep-alive connection, with the
# server's instrumentation on only while they are answered; writes the "Instructions per request" section.
#   Benchmarks/callgrind.sh [requests]      (default 200)
#   SCRATCH=.build-bench Benchmarks/callgrind.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
SCRATCH=${SCRATCH:-.build}
WORK=$(mktemp -d)
trap 'kill $(cat "$WORK/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$WORK"' EXIT

swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
swift build -c release --scratch-path "$SCRATCH" --product broker >&2
# Valgrind 3.19 cannot read the DWARF 5 that Swift's toolchain writes: it runs a copy without debug
# information (the counts need none).
BIN=$WORK/broker-full
objcopy --strip-debug "$PWD/$SCRATCH/release/broker-full" "$BIN"
cat >"$WORK/broker.json" <<JSON
{"server": {"login_throttle": false, "issuer": "http://127.0.0.1"}}
JSON
# Instrumentation off until each measurement turns it on: start-up and set-up are not counted.
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$WORK/cg.out" \
  "$BIN" serve --config "$WORK/broker.json" --port 0 --data-dir "$WORK/data" --log-level error \
  >"$WORK/out" 2>"$WORK/err" &
echo $! >"$WORK/pid"
for _ in $(seq 1200); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$WORK/out" || { echo "callgrind.sh: the broker did not start under valgrind" >&2; cat "$WORK/err" >&2; exit 1; }
URL=$(sed 's/broker listening on //' "$WORK/out")
SECRET=$("$PWD/$SCRATCH/release/broker" client add bench --scope deploy --data-dir "$WORK/data" --json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')

python3 - "$URL" "$N" "$SECRET" "$WORK" "$(cat "$WORK/pid")" <<'PY' | python3 Benchmarks/write_section.py "## Instructions per request"
import base64, datetime, glob, http.client, json, os, subprocess, sys, urllib.parse
url, n, secret, work, pid = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
host = urllib.parse.urlparse(url)
connection = http.client.HTTPConnection(host.hostname, host.port, timeout=600)

def call(method, path, body=None, headers=None):
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise SystemExit(f"callgrind.sh: {method} {path}: {response.status} {data[:200]!r}")
    return data

session = json.loads(call("POST", "/auth/register", json.dumps(
    {"email": "bench@example.com", "password": "correct horse battery staple"}),
    {"Content-Type": "application/json"}))
access, refresh = session["access_token"], session["refresh_token"]
basic = base64.b64encode(f"bench:{secret}".encode()).decode()
state = {"refresh": refresh}

def jwks(): call("GET", "/.well-known/jwks.json")
def me(): call("GET", "/auth/me", headers={"Authorization": "Bearer " + access})
def mint(): call("POST", "/auth/token", "grant_type=client_credentials&scope=deploy",
                 {"Content-Type": "application/x-www-form-urlencoded", "Authorization": "Basic " + basic})
def rotate():
    answer = json.loads(call("POST", "/auth/token", "grant_type=refresh_token&refresh_token=" + state["refresh"],
                             {"Content-Type": "application/x-www-form-urlencoded"}))
    state["refresh"] = answer["refresh_token"]

def control(*arguments):
    subprocess.run(["callgrind_control", *arguments, pid], check=True, capture_output=True)

rows = []
for name, request in [("`GET /.well-known/jwks.json` (a constant document)", jwks), ("`GET /auth/me` (ES256 verification)", me),
                      ("`client_credentials` mint (ES256 signature)", mint), ("`refresh_token` grant (SQLite rotation, ES256 signature)", rotate)]:
    for _ in range(20):
        request()  # warm: caches, connections, first-use paths
    for old in glob.glob(work + "/cg.out*"):
        os.remove(old)
    control("-z")
    control("-i", "on")
    for _ in range(n):
        request()
    control("-i", "off")
    control("-d")
    totals = 0
    for dump in glob.glob(work + "/cg.out*"):
        for line in open(dump):
            if line.startswith("totals:") or line.startswith("summary:"):
                totals = max(totals, int(line.split()[1]))
    rows.append((name, totals / n))

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
valgrind = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
floor = rows[0][1]
print(f"""## Instructions per request (callgrind)

Command: `Benchmarks/callgrind.sh {n}` — {datetime.date.today()}, {cpu}, {valgrind}, release build, SQLite store; {n} requests of each kind over one keep-alive connection, the server's instrumentation on only while they are answered (start-up, set-up and 20 warm-up requests each are not counted).

| request | instructions per request | against the constant document |
|---|---:|---:|""")
for name, count in rows:
    print(f"| {name} | {count:,.0f} | {count / floor:.2f}x |")
print("""
Instructions, unlike requests per second, do not depend on what else the machine is doing: run the same
command before and after a change to see what it costs. They are not time — a cache miss costs more than an
add — so this sits beside the wrk figures, not instead of them.""")
PY
