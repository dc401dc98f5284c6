#!/usr/bin/env bash
# The main job, start to finish, with no human: builds broker, starts `broker emulate` (the seven providers'
# emulators) and `broker serve` on its embedded SQLite store in a temporary data directory, signs in with
# Google through the loopback browser flow (`broker login --provider google`; the "browser" is a script that
# follows the redirects and approves as a test user), shows `broker whoami`, has Python's joserfc and PyJWT
# verify `broker token` against the broker's published JWKS, signs in with Apple (its form post) and with a
# provider of type oidc the same way, then does the same with a custom email +
# password account, mints a CI token, and stops both servers with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh quickstart

# The build, as a few lines of progress (the compiler's own ~2,000 lines go to a log, shown in part if it
# fails). Without the PostgreSQL trait: the quick start runs on SQLite, and postgres-nio with its two copies
# of BoringSSL is most of a first build; `swift build`, scripts/install.sh and the tests include it.
build_log=$(mktemp)
build() {
  echo "== swift build --disable-default-traits --product $1 (full log: $build_log)" >&2
  set +e
  swift build --disable-default-traits --product "$1" 2>&1 | tee -a "$build_log" | awk -v what="$1" '
    /^\[[0-9]+\/[0-9]+\]/ {
      split(substr($1, 2, length($1) - 2), step, "/")
      tenth = int(step[1] * 10 / step[2])
      if (tenth > shown) { shown = tenth; printf "   %s: %d%% of %d steps\n", what, tenth * 10, step[2] > "/dev/stderr" }
    }
    /^Fetching / { fetched++ }
    /^Build of product .* complete/ { print "   " $0 > "/dev/stderr" }
    END { if (fetched) printf "   (fetched %d packages)\n", fetched > "/dev/stderr" }'
  local status=${PIPESTATUS[0]}
  set -e
  if [ "$status" -ne 0 ]; then
    echo "quickstart: the build failed; its last lines (all of them in $build_log):" >&2
    grep -E "error:|warning: unable|Build failed" "$build_log" | head -40 >&2 || tail -40 "$build_log" >&2
    exit "$status"
  fi
}
build broker
build broker-full
rm -f "$build_log"
BROKER=$PWD/.build/debug/broker

work=$(mktemp -d)
server_pid=""
emulator_pid=""
cleanup() {
  for pid in "$server_pid" "$emulator_pid"; do
    if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT

echo "== broker emulate --port 0" >&2
"$BROKER" emulate --port 0 >"$work/emulator" 2>"$work/emulator.log" &
emulator_pid=$!
for _ in $(seq 300); do grep -q "emulator listening on" "$work/emulator" 2>/dev/null && break; sleep 0.1; done
cat "$work/emulator" >&2
emulator=$(sed 's/^emulator listening on //' "$work/emulator")
# Config/emulated.json with the emulator's actual port.
sed "s#http://127.0.0.1:8788#$emulator#g" Config/emulated.json >"$work/broker.json"

echo "== broker serve --config (Config/emulated.json) --port 0 --data-dir $work/data" >&2
"$BROKER" serve --config "$work/broker.json" --port 0 --data-dir "$work/data" --log-level warning \
  >"$work/ready" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 300); do grep -q "broker listening on" "$work/ready" 2>/dev/null && break; sleep 0.1; done
cat "$work/ready" >&2
url=$(sed 's/^broker listening on //' "$work/ready")

# The client's files go to a temporary BROKER_HOME, so the quick start never touches your own sessions.
# Its secrets stay in that folder's files too (credential_store "file"), never in your desktop keyring.
export BROKER_URL=$url BROKER_HOME=$work/home BROKER_CREDENTIAL_STORE=file
password=$(openssl rand -base64 18)  # a fresh demo password: on stdin only, never on argv, never printed

echo "== broker providers" >&2
"$BROKER" providers
echo "== broker login --provider google (loopback browser flow; \$BROWSER approves as test user alice)" >&2
BROWSER="python3 $PWD/Tests/Interop/browser_flow.py --open" BROWSER_ACCOUNT=alice BROWSER_RESULT="$work/browser.json" \
  "$BROKER" login --provider google --timeout 60
echo "== broker whoami" >&2
"$BROKER" whoami
echo "== broker token | verified by joserfc and PyJWT against $url/.well-known/jwks.json" >&2
"$BROKER" token | python3 Tests/Interop/verify_broker_token.py "$url" - |
  python3 -c 'import json, sys; c = json.load(sys.stdin); print("verified:", c["sub"], "idp", c["idp"], "email", c.get("email"))'
"$BROKER" logout
echo "== broker login --provider apple, then corp (a provider of \"type\": \"oidc\"): the same flow, other upstreams" >&2
for provider in apple corp; do
  account=$([ "$provider" = apple ] && echo ada || echo alice)
  BROWSER="python3 $PWD/Tests/Interop/browser_flow.py --open" BROWSER_ACCOUNT=$account BROWSER_RESULT="$work/browser.json" \
    "$BROKER" login --provider "$provider" --timeout 60
  "$BROKER" whoami | sed -n 1,3p  # (sed reads it all: no SIGPIPE under pipefail)
  "$BROKER" logout
done

echo "== broker register --email demo@example.com --password-stdin" >&2
printf '%s' "$password" | "$BROKER" register --email demo@example.com --name "Demo User" --password-stdin
echo "== broker logout; broker login --provider custom --email demo@example.com --password-stdin" >&2
"$BROKER" logout
printf '%s' "$password" | "$BROKER" login --provider custom --email demo@example.com --password-stdin

echo "== broker whoami" >&2
"$BROKER" whoami
echo "== broker token | verified by joserfc and PyJWT against $url/.well-known/jwks.json" >&2
"$BROKER" token | python3 Tests/Interop/verify_broker_token.py "$url" - | python3 -m json.tool
echo "== broker token --format exec-credential (kubectl credential plugin)" >&2
"$BROKER" token --format exec-credential | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["kind"], "expires", d["status"]["expirationTimestamp"])'
echo "== broker logout" >&2
"$BROKER" logout
echo "== CI: broker client add demo-ci; broker mint --client-id demo-ci --client-secret-stdin" >&2
secret=$("$BROKER" client add demo-ci --scope deploy --data-dir "$work/data" --json 2>/dev/null |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["client_secret"])')
printf '%s' "$secret" | "$BROKER" mint --client-id demo-ci --client-secret-stdin --ttl 300 |
  python3 Tests/Interop/verify_broker_token.py "$url" - |
  python3 -c 'import json, sys; c = json.load(sys.stdin); print(c["sub"], "scope", c["scope"], "lifetime", c["exp"] - c["iat"], "s")'
echo "== stopping the broker (SIGTERM)" >&2
kill -TERM "$server_pid"
wait "$server_pid"
server_pid=""
echo "done" >&2
