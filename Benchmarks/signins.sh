#!/usr/bin/env bash
# Sign-ins per core (issue "Performance, round four", goal 3): an app's whole authorization-code sign-in through
# broker's pages — the sign-in page, the password (or a passkey), consent remembered, the code, the token
# endpoint — made by Benchmarks/signins.py as new browsers, several at once. Password sign-ins are set against
# the scrypt bound measured in the same run (the cores ÷ one `openssl kdf` hash at the broker's cost), passkey
# sign-ins against the CPU their HTTP requests and cryptography cannot avoid. Writes the "Sign-ins per core"
# section of BENCHMARKS.md.
#   Benchmarks/signins.sh [seconds] [browsers]     (default 30 s and 4 browsers at once)
#   SCRATCH=.build-bench Benchmarks/signins.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
BROWSERS=${2:-4}
case "$SECONDS_EACH$BROWSERS" in '' | *[!0-9]*) echo "signins.sh: seconds and browsers must be whole numbers" >&2; exit 2 ;; esac
SCRATCH=${SCRATCH:-.build}
WORK=$(mktemp -d)
cleanup() {
  kill "$(cat "$WORK/pid" 2>/dev/null)" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
BIN=$PWD/$SCRATCH/release/broker-full
# The issuer is a name, not an address, so that passkeys are on (a WebAuthn relying-party id is a domain).
ISSUER=http://localhost
cat >"$WORK/broker.json" <<JSON
{"server": {"login_throttle": false, "issuer": "$ISSUER"}}
JSON
"$BIN" serve --config "$WORK/broker.json" --port 0 --data-dir "$WORK/data" --log-level error >"$WORK/out" 2>"$WORK/err" &
echo $! >"$WORK/pid"
PID=$(cat "$WORK/pid")
for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed 's/broker listening on //' "$WORK/out")

export EMAIL=bench@example.com PASSWORD="correct horse battery staple" REDIRECT=https://app.example/callback
export ACCESS APP_SECRET
REFRESH=$(curl -sf -H 'Content-Type: application/json' -d "{\"email\": \"$EMAIL\", \"password\": \"$PASSWORD\"}" \
  "$URL/auth/register" | python3 -c 'import json,sys; print(json.load(sys.stdin)["refresh_token"])')
# Adding a passkey is an account change: it takes an account token, which the session's refresh token gets.
ACCESS=$(printf %s "$REFRESH" | curl -sS --data-urlencode grant_type=refresh_token --data-urlencode scope=account \
  --data-urlencode client_id=broker-cli --data-urlencode "refresh_token@-" "$URL/auth/token" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
# A third-party app: consent is asked once (the driver gives it before the measurement), then remembered.
APP_SECRET=$("$BIN" client add bench --redirect-uri "$REDIRECT" --data-dir "$WORK/data" --json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["client_secret"])')

ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
# signins MODE: one measurement; appends "MODE signins requests ticks" to the results.
signins() {
  local before after counts
  before=$(ticks)
  counts=$(python3 Benchmarks/signins.py "$URL" "$ISSUER" "$1" "$SECONDS_EACH" "$BROWSERS")
  after=$(ticks)
  echo "$1 $(echo "$counts" | python3 -c 'import json,sys; c = json.load(sys.stdin); print(c["signins"], c["requests"])') $((after - before))" >>"$WORK/results"
}
signins password
signins passkey
# The floor's parts, in the same run: the routed document's CPU per request (wrk, keep-alive), one hash at the
# broker's cost, and one core's ES256 verifications and signatures and RS256 signatures.
before=$(ticks)
wrk -t2 -c16 -d5s "$URL/.well-known/jwks.json?via=router" >"$WORK/routed.txt"
after=$(ticks)
echo "routed $(awk '/requests in/ {print $1}' "$WORK/routed.txt") 0 $((after - before))" >>"$WORK/results"
for _ in 1 2 3 4 5; do
  /usr/bin/time -f %e openssl kdf -keylen 32 -kdfopt "pass:correct horse" -kdfopt salt:0123456789abcdef \
    -kdfopt n:131072 -kdfopt r:8 -kdfopt p:1 -kdfopt maxmem_bytes:268435456 SCRYPT 2>&1 >/dev/null | tail -1
done >"$WORK/scrypt"
openssl speed -seconds 3 ecdsap256 2>/dev/null | awk '/256 bits ecdsa \(nistp256\)/ {print "ecdsa", $(NF-1), $NF}' >>"$WORK/speed"
openssl speed -seconds 3 rsa2048 2>/dev/null | awk '/^rsa 2048 bits/ {print "rsa", $(NF-1), $NF}' >>"$WORK/speed"

python3 - "$WORK/results" "$WORK/scrypt" "$WORK/speed" "$SECONDS_EACH" "$BROWSERS" "$(nproc)" "$(getconf CLK_TCK)" <<'PY' |
import datetime, statistics, subprocess, sys
rows = {}
for line in open(sys.argv[1]):
    name, signins, requests, ticks = line.split()
    rows[name] = (int(signins), int(requests), int(ticks))
hash_s = statistics.median(float(line) for line in open(sys.argv[2]) if line.strip())
speed = {fields[0]: (float(fields[1]), float(fields[2])) for fields in (line.split() for line in open(sys.argv[3]))}
seconds, browsers, cores, hz = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
openssl = subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip()
def rate(name): return rows[name][0] / seconds
def cpu_ms(name): return rows[name][2] / hz / rows[name][0] * 1e3
routed_us = rows["routed"][2] / hz / rows["routed"][0] * 1e6
bound = cores / hash_s
es_sign_us, es_verify_us = 1e6 / speed["ecdsa"][0], 1e6 / speed["ecdsa"][1]
rsa_sign_us = 1e6 / speed["rsa"][0]
per_passkey = rows["passkey"][1] / rows["passkey"][0]
floor_passkey_ms = (per_passkey * routed_us + es_verify_us + es_sign_us + rsa_sign_us) / 1e3
per_password = rows["password"][1] / rows["password"][0]
print(f"""## Sign-ins per core: an app's whole sign-in (SQLite store)

Command: `Benchmarks/signins.sh {sys.argv[4]} {browsers}` — {datetime.date.today()}, {cpu}, {cores} cores shared by the broker and the driver (`Benchmarks/signins.py`: {browsers} new browsers at once, Python `requests`), {openssl}, release build, SQLite store; password hashes scrypt N = 2^17, r = 8, p = 1 (128 MiB, the broker's default), one hash {hash_s * 1000:.0f} ms (median of 5 `openssl kdf` in the same run).

| sign-in | sign-ins/s | per core | broker CPU per sign-in | against | ratio | goal |
|---|---:|---:|---:|---|---:|---:|
| password: the sign-in page, the password, consent remembered, the code, the token endpoint ({per_password:.0f} HTTP requests) | {rate("password"):,.2f} | {rate("password") / cores:,.2f} | {cpu_ms("password"):,.0f} ms | the scrypt bound: {cores} cores ÷ one hash = {bound:.2f}/s | **{rate("password") / bound:.2f}x** | ≥ 0.9x |
| passkey: the sign-in page, fresh options, the assertion, consent remembered, the code, the token endpoint ({per_passkey:.0f} HTTP requests) | {rate("passkey"):,.1f} | {rate("passkey") / cores:,.1f} | {cpu_ms("passkey"):,.2f} ms | {per_passkey:.0f} routed documents ({routed_us:.0f} µs each) + one ES256 verification + an ES256 and an RS256 signature (the tokens): {floor_passkey_ms:.2f} ms | **{floor_passkey_ms / cpu_ms("passkey"):.2f}** | ≥ 0.8 |

Each sign-in is a new browser: no cookie, a new connection, the app's authorization request with PKCE and a nonce,
and the app's own request to the token endpoint (HTTP Basic), whose answer carries an access token and an RS256 id
token. The password row is bound by scrypt: its rate against the cores' hashing rate is the goal. The passkey row
has no hash: its ratio is the CPU its requests cannot avoid (each a routed document, measured with wrk in the same
run on keep-alive connections, so a new connection's cost counts against the broker) over the broker's CPU per
sign-in; the store's own time (the passkey read, the browser session, the code written and spent, the session
started) is left out of the floor, so the ratio is a lower bound. The driver shares the cores, so the passkey
rate is the driver's as much as the broker's; the CPU per sign-in is the broker's alone.
""", end="")
PY
  python3 Benchmarks/write_section.py "## Sign-ins per core"
