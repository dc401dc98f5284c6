#!/usr/bin/env python3
"""Sends COUNT requests of one kind, one after another on one keep-alive connection, and checks each answer.

  drive.py URL KIND COUNT      KIND: jwks | jwks_router | me | mint | refresh | me_dpop | refresh_dpop

jwks_router asks for the same document with a query, which the broker leaves to its router (the way every other
request goes), so the constant document is measured both ways.

me reads the access token from $ACCESS; mint the client's "base64(id:secret)" from $MINT_BASIC; refresh spends
the refresh token in the file $REFRESH_TOKEN_FILE and writes back the one the last grant returned, so the next
call continues the chain. The _dpop kinds do the same with DPoP-bound tokens ($ACCESS_DPOP, the chain in
$REFRESH_DPOP_FILE), each request with a fresh proof by the key in the PEM file $DPOP_KEY (made here, before the
request is sent, so its cost is the driver's). Exits non-zero at the first answer that is not a 200 with what the kind expects.
"""
import http.client
import json
import os
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

url, kind, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
parts = urllib.parse.urlparse(url)
connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
form = {"Content-Type": "application/x-www-form-urlencoded"}
token_file = {"refresh": "REFRESH_TOKEN_FILE", "refresh_dpop": "REFRESH_DPOP_FILE"}.get(kind)
token = open(os.environ[token_file]).read().strip() if token_file else None
prover = None
if kind.endswith("_dpop"):
    import dpop_proofs

    prover = dpop_proofs.Prover(dpop_proofs.load(os.environ["DPOP_KEY"]))
    # Proofs name the broker's issuer (its URL as callgrind.sh configures it), not the port it listens on.
    issuer = "http://127.0.0.1"


def send(method, path, headers, body=None):
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        sys.exit(f"drive.py: {kind}: HTTP {response.status}: {data[:200]!r}")
    return data


for _ in range(count):
    if kind == "jwks":
        send("GET", "/.well-known/jwks.json", {})
    elif kind == "jwks_router":
        send("GET", "/.well-known/jwks.json?via=router", {})
    elif kind == "me":
        send("GET", "/auth/me", {"Authorization": "Bearer " + os.environ["ACCESS"]})
    elif kind == "mint":
        headers = dict(form, Authorization="Basic " + os.environ["MINT_BASIC"])
        json.loads(send("POST", "/auth/token", headers, "grant_type=client_credentials&ttl=300"))["access_token"]
    elif kind == "refresh":
        body = "grant_type=refresh_token&refresh_token=" + token
        token = json.loads(send("POST", "/auth/token", form, body))["refresh_token"]
    elif kind == "me_dpop":
        access = os.environ["ACCESS_DPOP"]
        proof = prover.proof("GET", issuer + "/auth/me", access)
        send("GET", "/auth/me", {"Authorization": "DPoP " + access, "DPoP": proof})
    elif kind == "refresh_dpop":
        body = "grant_type=refresh_token&refresh_token=" + token
        headers = dict(form, DPoP=prover.proof("POST", issuer + "/auth/token"))
        token = json.loads(send("POST", "/auth/token", headers, body))["refresh_token"]
    else:
        sys.exit(f"drive.py: unknown kind {kind}")
if token is not None:
    with open(os.environ[token_file], "w") as file:
        file.write(token + "\n")
