#!/usr/bin/env bash
# The main job, start to finish, with no human: builds broker, makes a signing key, mints a token offline
# and shows it with its decoded header and claims, verified by Python's joserfc against the public key.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
swift build --product broker >&2
BROKER=.build/debug/broker

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
umask 077
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/signing-key.pem" 2>/dev/null

echo "== broker mint --signing-key signing-key.pem --subject ci:quickstart --claim team=docs" >&2
token=$("$BROKER" mint --signing-key "$work/signing-key.pem" --subject ci:quickstart --claim team=docs --ttl 300)
echo "$token"
echo "== decoded and verified by joserfc against the public key" >&2
python3 - "$token" "$work/signing-key.pem" <<'PY'
import json, sys, warnings
warnings.simplefilter("ignore")
from joserfc import jwt
from joserfc.jwk import ECKey
key = ECKey.import_key(open(sys.argv[2]).read())
token = jwt.decode(sys.argv[1], key, algorithms=["ES256"])
print(json.dumps({"header": token.header, "claims": token.claims}, indent=2))
PY
