#!/usr/bin/env python3
"""Cross-checks broker's JOSE code against joserfc (and plain `cryptography`), code we did not write.

Usage: jose_interop.py DIR
  DIR/ours.json   written by the Swift test: {"jwks": {...}, "tokens": {"ES256": jwt, ...},
                  "private": {"ES256": jwk, "RS256": jwk}, "issuer": ..., "audience": ...}
Writes DIR/theirs.json: {"verified": {...}, "jwks": {...}, "tokens": {...}, "forged": {name: token}}
Exits non-zero with a message if any of our tokens fails to verify in joserfc.
"""
import base64
import hashlib
import hmac
import json
import sys
import time
import warnings

warnings.simplefilter("ignore")

from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from joserfc import jwt  # noqa: E402
from joserfc.jwk import ECKey, KeySet, OKPKey, RSAKey  # noqa: E402


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def compact(header: dict, claims: dict, signature: bytes) -> str:
    return b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode()) + "." + b64(signature)


def main() -> int:
    folder = sys.argv[1]
    with open(f"{folder}/ours.json") as f:
        ours = json.load(f)

    # 1. Our tokens verify in joserfc against our JWKS, for all three algorithms.
    keyset = KeySet.import_key_set(ours["jwks"])
    verified = {}
    for alg, token in ours["tokens"].items():
        decoded = jwt.decode(token, keyset, algorithms=[alg])
        claims_registry = jwt.JWTClaimsRegistry(
            iss={"essential": True, "value": ours["issuer"]},
            aud={"essential": True, "value": ours["audience"]},
            exp={"essential": True},
        )
        claims_registry.validate(decoded.claims)
        if decoded.header.get("alg") != alg:
            print(f"{alg}: header alg is {decoded.header.get('alg')}", file=sys.stderr)
            return 1
        verified[alg] = decoded.claims["sub"]

    # 2. joserfc signs tokens with keys of its own; the Swift side must accept them.
    now = int(time.time())
    claims = {"iss": ours["issuer"], "aud": ours["audience"], "sub": "made-by-joserfc", "iat": now, "exp": now + 300}
    theirs_keys = {
        "ES256": ECKey.generate_key("P-256", parameters={"kid": "py-es256"}),
        "RS256": RSAKey.generate_key(2048, parameters={"kid": "py-rs256"}),
        "EdDSA": OKPKey.generate_key("Ed25519", parameters={"kid": "py-eddsa"}),
    }
    tokens = {}
    for alg, key in theirs_keys.items():
        tokens[alg] = jwt.encode({"alg": alg, "kid": key.kid, "typ": "JWT"}, claims, key, algorithms=[alg])
    jwks = {"keys": [key.as_dict(private=False) for key in theirs_keys.values()]}

    # 3. The forged set, aimed at our ES256 and RS256 keys.
    es = ours["tokens"]["ES256"]
    es_kid = json.loads(base64.urlsafe_b64decode(es.split(".")[0] + "==="))["kid"]
    rs = ours["tokens"]["RS256"]
    rs_kid = json.loads(base64.urlsafe_b64decode(rs.split(".")[0] + "==="))["kid"]
    our_claims = dict(claims, sub="forged")
    forged = {}
    forged["alg_none"] = compact({"alg": "none", "kid": es_kid}, our_claims, b"")
    forged["alg_none_with_signature"] = compact({"alg": "none", "kid": es_kid}, our_claims, b"\x00")
    forged["alg_None"] = compact({"alg": "None", "kid": es_kid}, our_claims, b"x")
    # HS256 keyed with the RSA public key's PEM: the classic algorithm-confusion attack.
    rsa_jwk = next(k for k in ours["jwks"]["keys"] if k["kid"] == rs_kid)
    rsa_public_pem = RSAKey.import_key(rsa_jwk).public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = {"alg": "HS256", "kid": rs_kid, "typ": "JWT"}
    signing_input = b64(json.dumps(header).encode()) + "." + b64(json.dumps(our_claims).encode())
    mac = hmac.new(rsa_public_pem, signing_input.encode(), hashlib.sha256).digest()
    forged["hs256_with_public_pem"] = signing_input + "." + b64(mac)
    header_no_kid = {"alg": "HS256", "typ": "JWT"}
    signing_input = b64(json.dumps(header_no_kid).encode()) + "." + b64(json.dumps(our_claims).encode())
    forged["hs256_with_public_pem_no_kid"] = signing_input + "." + b64(
        hmac.new(rsa_public_pem, signing_input.encode(), hashlib.sha256).digest())
    es_header = {"alg": "ES256", "kid": es_kid, "typ": "JWT"}
    forged["zero_signature"] = compact(es_header, our_claims, bytes(64))
    # A real signature by our own private key, but DER-encoded as OpenSSL/`cryptography` emit it.
    es_private = ECKey.import_key(ours["private"]["ES256"]).private_key
    signing_input = b64(json.dumps(es_header).encode()) + "." + b64(json.dumps(our_claims).encode())
    der = es_private.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
    forged["der_signature"] = signing_input + "." + b64(der)
    h, p, s = es.split(".")
    tampered = json.loads(base64.urlsafe_b64decode(p + "==="))
    tampered["sub"] = "admin"
    forged["tampered_payload"] = h + "." + b64(json.dumps(tampered).encode()) + "." + s
    forged["unknown_kid"] = compact({"alg": "ES256", "kid": "not-a-known-kid"}, our_claims, bytes(64))
    forged["truncated"] = es[: len(es) - 10]
    forged["four_segments"] = es + "." + s
    forged["oversized"] = compact(es_header, dict(our_claims, pad="A" * 20000), bytes(64))

    with open(f"{folder}/theirs.json", "w") as f:
        json.dump({"verified": verified, "jwks": jwks, "tokens": tokens, "forged": forged}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
