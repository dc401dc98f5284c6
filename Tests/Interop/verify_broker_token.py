#!/usr/bin/env python3
"""Verifies a broker access token the way a resource server would, with code we did not write.

Usage: verify_broker_token.py BROKER_URL TOKEN [AUDIENCE]
Fetches discovery and the JWKS over HTTP (urllib), then checks the token with joserfc *and* PyJWT:
signature with the key the header's kid names, alg from that key, typ at+jwt (RFC 9068), iss, aud, exp,
nbf, iat. Prints the claims as JSON on success; exits 1 with the reason otherwise.
"""
import json
import sys
import time
import urllib.request
import warnings

warnings.simplefilter("ignore")

import jwt as pyjwt  # noqa: E402
from joserfc import jwt  # noqa: E402
from joserfc.jwk import KeySet  # noqa: E402


def fetch(url):
    with urllib.request.urlopen(url, timeout=120) as response:
        return json.load(response)


def main():
    base, token = sys.argv[1], sys.argv[2]
    if token == "-":  # the token on stdin, so that it never shows in a process listing
        token = sys.stdin.read().strip()
    audience = sys.argv[3] if len(sys.argv) > 3 else "broker"
    discovery = fetch(base + "/.well-known/openid-configuration")
    if discovery["issuer"] != base:
        sys.exit(f"discovery issuer {discovery['issuer']} != {base}")
    jwks = fetch(discovery["jwks_uri"])
    header = pyjwt.get_unverified_header(token)
    if header.get("typ") != "at+jwt":
        sys.exit(f"typ is {header.get('typ')!r}, expected at+jwt")
    entry = next((k for k in jwks["keys"] if k["kid"] == header.get("kid")), None)
    if entry is None:
        sys.exit(f"kid {header.get('kid')} not in the JWKS")
    if entry.get("use") != "sig" or entry.get("alg") != header["alg"]:
        sys.exit(f"JWKS entry {entry} does not bind alg {header['alg']}")

    # joserfc: the key set, the entry's algorithm only.
    keys = KeySet.import_key_set(jwks)
    decoded = jwt.decode(token, keys, algorithms=[entry["alg"]])
    registry = jwt.JWTClaimsRegistry(
        iss={"essential": True, "value": discovery["issuer"]},
        aud={"essential": True, "value": audience},
        sub={"essential": True},
        exp={"essential": True},
        iat={"essential": True},
        jti={"essential": True},
    )
    registry.validate(decoded.claims)

    # PyJWT: the same token through a second implementation.
    key = pyjwt.PyJWK.from_dict(entry)
    claims = pyjwt.decode(
        token,
        key=key.key,
        algorithms=[entry["alg"]],
        audience=audience,
        issuer=discovery["issuer"],
        options={"require": ["exp", "iat", "nbf", "iss", "sub", "aud", "jti"]},
    )
    if claims != decoded.claims:
        sys.exit("joserfc and PyJWT disagree on the claims")
    if not claims["iat"] <= time.time() + 60:
        sys.exit("iat in the future")
    print(json.dumps(claims, sort_keys=True))


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as error:  # noqa: BLE001 - the reason is the output
        sys.exit(f"{type(error).__name__}: {error}")
