#!/usr/bin/env python3
"""DPoP proofs (RFC 9449) for the benchmarks, made ahead of the measurement so that their cost is not measured.

  dpop_proofs.py key FILE                          a new P-256 key, PEM, 0600 (the key a CLI would hold)
  dpop_proofs.py one FILE METHOD URL [ath]         one proof, printed
  dpop_proofs.py many FILE METHOD URL COUNT OUT [ath]
                                                   COUNT proofs, one per line, into OUT

Every proof has its own `jti` and the current `iat`, so a set is good for the broker's window (five minutes) from
when it was made; with `ath`, the proofs name the access token in $ACCESS (a token stays off the command line).
Imported by Benchmarks/callgrind/drive.py too.
"""
import base64
import hashlib
import json
import os
import secrets
import sys
import time

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def load(path):
    with open(path, "rb") as file:
        return serialization.load_pem_private_key(file.read(), password=None)


def new_key(path):
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(pem)


class Prover:
    """Signs proofs with one key; the header (with the public key) is encoded once."""

    def __init__(self, key):
        self.key = key
        numbers = key.public_key().public_numbers()
        jwk = {"crv": "P-256", "kty": "EC", "x": b64(numbers.x.to_bytes(32, "big")), "y": b64(numbers.y.to_bytes(32, "big"))}
        self.header = b64(json.dumps({"typ": "dpop+jwt", "alg": "ES256", "jwk": jwk}, separators=(",", ":")).encode())

    def proof(self, method, url, token=None, now=None):
        claims = {"jti": secrets.token_urlsafe(16), "htm": method, "htu": url, "iat": int(now or time.time())}
        if token:
            claims["ath"] = b64(hashlib.sha256(token.encode()).digest())
        signing_input = self.header + "." + b64(json.dumps(claims, separators=(",", ":")).encode())
        r, s = decode_dss_signature(self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return signing_input + "." + b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def main(argv):
    if len(argv) == 3 and argv[1] == "key":
        new_key(argv[2])
    elif len(argv) in (5, 6) and argv[1] == "one" and argv[5:] in ([], ["ath"]):
        print(Prover(load(argv[2])).proof(argv[3], argv[4], os.environ["ACCESS"] if argv[5:] else None))
    elif len(argv) in (7, 8) and argv[1] == "many" and argv[7:] in ([], ["ath"]):
        prover = Prover(load(argv[2]))
        method, url, count, out = argv[3], argv[4], int(argv[5]), argv[6]
        token = os.environ["ACCESS"] if argv[7:] else None
        now = int(time.time())
        with open(out, "w") as file:
            for _ in range(count):
                file.write(prover.proof(method, url, token, now) + "\n")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
