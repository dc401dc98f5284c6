#!/usr/bin/env python3
"""An independent WebAuthn relying party: Yubico's python-fido2 (fido2.server.Fido2Server) judges the same
ceremonies the broker judges.

Reads one JSON object on stdin: {"rp_id", "origin", "cases": [...]}, each case
  {"kind": "register", "challenge": B64U, "credential": {...PublicKeyCredential JSON...}}
  {"kind": "authenticate", "challenge": B64U, "credential": {...}, "attestation_object": B64U}
(the registration's attestation object gives the stored credential). User verification is required, as the
broker requires it. Prints {"verdicts": [{"ok": true, "credential_id": B64U, "algorithm": N, "sign_count": N,
"aaguid": HEX} | {"ok": false, "reason": "..."}]}.
python-fido2 leaves the signature counter and single-use challenges to the relying party's storage: what it
accepts there, the broker's store refuses (the test says which).
"""
import base64
import json
import sys

from fido2.server import Fido2Server
from fido2.webauthn import AttestationObject, PublicKeyCredentialRpEntity


def b64u_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


request = json.load(sys.stdin)
server = Fido2Server(PublicKeyCredentialRpEntity(id=request["rp_id"], name="broker"),
                     verify_origin=lambda origin: origin == request["origin"])
verdicts = []
for case in request["cases"]:
    state = {"challenge": case["challenge"], "user_verification": "required"}
    try:
        if case["kind"] == "register":
            auth_data = server.register_complete(state, case["credential"])
            data = auth_data.credential_data
            verdicts.append({"ok": True, "credential_id": b64u(data.credential_id),
                             "algorithm": data.public_key[3], "sign_count": auth_data.counter,
                             "aaguid": bytes(data.aaguid).hex()})
        else:
            stored = AttestationObject(b64u_decode(case["attestation_object"])).auth_data.credential_data
            server.authenticate_complete(state, [stored], case["credential"])
            verdicts.append({"ok": True})
    except Exception as error:  # every refusal, with python-fido2's reason
        verdicts.append({"ok": False, "reason": f"{type(error).__name__}: {error}"})
print(json.dumps({"verdicts": verdicts}))
