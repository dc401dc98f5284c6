#!/usr/bin/env bash
# The main job, start to finish, with no human: builds broker, starts `broker serve` on its embedded SQLite
# store in a temporary data directory, registers a demo account and signs in with it over the HTTP API,
# asks the broker who the token belongs to, has Python's joserfc and PyJWT verify the token against the
# broker's published JWKS, and stops the server with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
swift build --product broker >&2
BROKER=$PWD/.build/debug/broker

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== broker serve --port 0 --data-dir $work/data" >&2
"$BROKER" serve --port 0 --data-dir "$work/data" --log-level warning >"$work/ready" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 300); do grep -q "broker listening on" "$work/ready" 2>/dev/null && break; sleep 0.1; done
cat "$work/ready" >&2
url=$(sed 's/^broker listening on //' "$work/ready")

password=$(openssl rand -base64 18)  # a fresh demo password; never on argv, never printed
json() { python3 -c 'import json, sys; print(json.dumps(dict(zip(sys.argv[1::2], sys.argv[2::2]))))' "$@"; }
field() { python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

echo "== POST /auth/register (demo@example.com)" >&2
json email demo@example.com password "$password" name "Demo User" |
  curl -sf -H 'Content-Type: application/json' --data-binary @- "$url/auth/register" >"$work/registered.json"
echo "== POST /auth/login" >&2
json email demo@example.com password "$password" |
  curl -sf -H 'Content-Type: application/json' --data-binary @- "$url/auth/login" >"$work/session.json"
token=$(field access_token <"$work/session.json")
echo "user: $(field user_id <"$work/session.json")" >&2

echo "== GET /auth/me" >&2
curl -sf -H "Authorization: Bearer $token" "$url/auth/me"
echo
echo "== the access token, verified by joserfc and PyJWT against $url/.well-known/jwks.json" >&2
python3 Tests/Interop/verify_broker_token.py "$url" "$token" | python3 -m json.tool
echo "== stopping the broker (SIGTERM)" >&2
kill -TERM "$server_pid"
wait "$server_pid"
server_pid=""
echo "done" >&2
