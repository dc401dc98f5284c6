"""A software passkey for the sign-in benchmark (Benchmarks/signins.py): one P-256 credential that makes a
WebAuthn registration ("none" attestation, user present and verified) and assertions, in the JSON the broker's
pages post (the shape of their passkey.js). python-fido2 encodes the CBOR; `cryptography` signs."""
import base64
import hashlib
import json
import os
import struct

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from fido2 import cbor

# Flags of authenticator data: user present, user verified, attested credential data included.
UP, UV, AT = 0x01, 0x04, 0x40


def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64u_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Passkey:
    def __init__(self, rp_id, origin):
        self.rp_id, self.origin = rp_id, origin
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.credential_id = os.urandom(16)
        self.user_handle = None

    def _client_data(self, kind, challenge):
        return json.dumps({"type": kind, "challenge": challenge, "origin": self.origin, "crossOrigin": False},
                          separators=(",", ":")).encode()

    def _auth_data(self, flags, attested=b""):
        # A signature counter of 0, as platform passkeys (synced ones) send: sign-ins from several threads at once
        # may reach the broker in any order, which a counting authenticator's could not.
        return hashlib.sha256(self.rp_id.encode()).digest() + bytes([flags]) + struct.pack(">I", 0) + attested

    def register(self, options):
        """The credential JSON for `navigator.credentials.create(options)` (the options as the page holds them)."""
        self.user_handle = b64u_decode(options["user"]["id"])
        numbers = self.key.public_key().public_numbers()
        cose = cbor.encode({1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big")})
        attested = bytes(16) + struct.pack(">H", len(self.credential_id)) + self.credential_id + cose
        auth_data = self._auth_data(UP | UV | AT, attested)
        attestation = cbor.encode({"fmt": "none", "attStmt": {}, "authData": auth_data})
        response = {"clientDataJSON": b64u(self._client_data("webauthn.create", options["challenge"])),
                    "attestationObject": b64u(attestation), "transports": ["internal"]}
        return self._credential(response)

    def assertion(self, options):
        """The credential JSON for `navigator.credentials.get(options)`."""
        client_data = self._client_data("webauthn.get", options["challenge"])
        auth_data = self._auth_data(UP | UV)
        signature = self.key.sign(auth_data + hashlib.sha256(client_data).digest(), ec.ECDSA(hashes.SHA256()))
        response = {"clientDataJSON": b64u(client_data), "authenticatorData": b64u(auth_data),
                    "signature": b64u(signature), "userHandle": b64u(self.user_handle)}
        return self._credential(response)

    def _credential(self, response):
        return json.dumps({"id": b64u(self.credential_id), "rawId": b64u(self.credential_id), "type": "public-key",
                           "response": response, "authenticatorAttachment": "platform", "clientExtensionResults": {}})
