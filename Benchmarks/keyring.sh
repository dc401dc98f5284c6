#!/usr/bin/env bash
# `broker token` with the refresh token in the desktop keyring against the file store, in one run (issue
# "Keyring"): the warm path (a file read either way) and a refreshing `broker token` (every run finds its
# access token expired). The keyring is Debian's gnome-keyring on a private session bus
# (Tests/Interop/keyring_session.py); writes the "broker token with the keyring" section of BENCHMARKS.md.
#   Benchmarks/keyring.sh [runs]     (default 100)
#   SCRATCH=.build-bench Benchmarks/keyring.sh   (a release build kept apart from the debug one)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-100}
SCRATCH=${SCRATCH:-.build}
WORK=$(mktemp -d)
cleanup() {
  kill "$(cat "$WORK/pid" 2>/dev/null)" 2>/dev/null || true
  [ -n "${KS_PID:-}" ] && kill "$KS_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
swift build -c release --scratch-path "$SCRATCH" --product broker >&2
BIN=$PWD/$SCRATCH/release/broker
"$BIN" serve --port 0 --data-dir "$WORK/data" --log-level error >"$WORK/out" 2>"$WORK/err" &
echo $! >"$WORK/pid"
for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
export BROKER_URL=$(sed 's/broker listening on //' "$WORK/out")

coproc KS { python3 Tests/Interop/keyring_session.py "$WORK/keyring"; }
KS_PID=$KS_PID
read -r ready <&"${KS[0]}"
export DBUS_SESSION_BUS_ADDRESS=${ready#ready } XDG_RUNTIME_DIR=

# Two homes, one account: one keeps its secrets in the keyring, the other in the file.
password=$(openssl rand -base64 18)
echo "$password" | BROKER_HOME=$WORK/file BROKER_CREDENTIAL_STORE=file "$BIN" register --email bench@example.com \
  --password-stdin 2>/dev/null
echo "$password" | BROKER_HOME=$WORK/keyring-home BROKER_CREDENTIAL_STORE=keyring "$BIN" login \
  --email bench@example.com --password-stdin 2>/dev/null
grep -q '"secrets":"keyring"' "$WORK/keyring-home/credentials.json" || { echo "keyring.sh: not in the keyring" >&2; exit 1; }
# hyperfine's --prepare: the cached access token expires, so the next `broker token` refreshes.
cat >"$WORK/expire.py" <<'PY'
import json, sys, time
path = sys.argv[1] + "/credentials.json"
doc = json.load(open(path))
for session in doc["sessions"]:
    session["expires_at"] = int(time.time()) - 1
json.dump(doc, open(path, "w"))
PY

hyperfine -N --warmup 10 --runs "$RUNS" --export-json "$WORK/warm.json" \
  -n "true" "env BROKER_HOME=$WORK/file /bin/true" \
  -n "warm, file" "env BROKER_HOME=$WORK/file BROKER_CREDENTIAL_STORE=file $BIN token" \
  -n "warm, keyring" "env BROKER_HOME=$WORK/keyring-home BROKER_CREDENTIAL_STORE=keyring $BIN token" >&2
hyperfine -N --warmup 5 --runs "$RUNS" --export-json "$WORK/refresh.json" \
  -n "refresh, file" --prepare "python3 $WORK/expire.py $WORK/file" \
  "env BROKER_HOME=$WORK/file BROKER_CREDENTIAL_STORE=file $BIN token" \
  -n "refresh, keyring" --prepare "python3 $WORK/expire.py $WORK/keyring-home" \
  "env BROKER_HOME=$WORK/keyring-home BROKER_CREDENTIAL_STORE=keyring $BIN token" >&2

python3 - "$WORK/warm.json" "$WORK/refresh.json" "$RUNS" <<'PY' | python3 Benchmarks/write_section.py "## broker token with the keyring"
import datetime, json, sys
rows = {}
for path in sys.argv[1:3]:
    for result in json.load(open(path))["results"]:
        rows[result["command"]] = result
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
def ms(name): return f'{rows[name]["mean"] * 1000:.2f} ms'
def sd(name): return f'{rows[name]["stddev"] * 1000:.2f} ms'
true = rows["true"]["mean"]
print(f"""## broker token with the keyring (hyperfine, gnome-keyring)

Command: `Benchmarks/keyring.sh {sys.argv[3]}` — {datetime.date.today()}, {cpu}, release build, `hyperfine -N`, {sys.argv[3]} runs each; Debian's gnome-keyring-daemon on a private session bus; the broker on SQLite on the same machine.

| command | mean | σ | ratio |
|---|---:|---:|---:|
| `env … /bin/true` (the same `env` start as the rows below) | {ms("true")} | {sd("true")} | 1.00x to `/bin/true` |
| warm `broker token`, file store | {ms("warm, file")} | {sd("warm, file")} | {rows["warm, file"]["mean"] / true:.1f}x to `/bin/true` |
| warm `broker token`, keyring | {ms("warm, keyring")} | {sd("warm, keyring")} | {rows["warm, keyring"]["mean"] / true:.1f}x to `/bin/true` |
| refreshing `broker token`, file store | {ms("refresh, file")} | {sd("refresh, file")} | 1.00x |
| refreshing `broker token`, keyring | {ms("refresh, keyring")} | {sd("refresh, keyring")} | **{rows["refresh, keyring"]["mean"] / rows["refresh, file"]["mean"]:.2f}x** to the file store |

The warm path is the same with either store: the access token stays in `credentials.json`, and the launcher
reads only that file. A refresh with the keyring adds the D-Bus round trips of one command — connect and
authenticate to the bus, open a `plain` session, find the default collection and check it is unlocked, read
the refresh token, write the rotated one, read the DPoP key — to the refresh itself (`broker-full`'s start,
the proof, the HTTP round trip, the broker's rotation).
""", end="")
PY
