#!/usr/bin/env python3
"""A CI platform of the tests' own: an OIDC issuer on 127.0.0.1 that mints GitHub-Actions-shaped ID tokens.

Signs with joserfc (code the broker did not write). Prints "issuer-base http://127.0.0.1:PORT" once
listening, serves until stdin closes. Each path prefix is its own issuer ("tenant"):

  /<tenant>/.well-known/openid-configuration   discovery ("broken": jwks_uri on a closed port)
  /<tenant>/.well-known/jwks                   the tenant's public keys (RS256 and ES256)
  /<tenant>/token?sub=&aud=&...                a signed ID token (text), parameters below
  /<tenant>/rotate                             adds a new current key (the old one stays published)
  /stats                                       {"jwks_fetches": {tenant: n}, "discovery_fetches": {...}}
  /release                                     lets the "held" tenant's discovery answer (see below)

The tenant "held" keeps a discovery request waiting: it prints "held" on stdout when the request arrives,
then answers once /release has been asked for (at most ten minutes later). A test sees, as an event, that a
broker is inside a request, and chooses when that request may finish.

Token parameters: sub, aud (default "broker"), iss (default the tenant's issuer), iat/nbf/exp as offsets in
seconds from now (defaults 0, 0, 300), jti (default random), alg (RS256 | ES256), claims (a JSON object merged
into the claims; null removes one), variant:
  none        alg "none" and an empty signature
  hs256       HS256 keyed with the issuer's public key PEM (the classic key-confusion forgery)
  unknown-kid signed by a key the JWKS does not publish
  no-jti      no jti claim
"""
import base64
import hmac
import hashlib
import json
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey, KeySet

LOCK = threading.Lock()
TENANTS = {}
STATS = {"jwks_fetches": {}, "discovery_fetches": {}}
RELEASED = threading.Event()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def new_keys(generation: int):
    rsa = RSAKey.generate_key(2048, parameters={"kid": f"rsa-{generation}", "alg": "RS256", "use": "sig"})
    ec = ECKey.generate_key("P-256", parameters={"kid": f"ec-{generation}", "alg": "ES256", "use": "sig"})
    return {"RS256": rsa, "ES256": ec}


def tenant(name: str):
    with LOCK:
        if name not in TENANTS:
            TENANTS[name] = {"keys": [new_keys(1)], "generation": 1}
        return TENANTS[name]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/", 1)
        if url.path == "/stats":
            with LOCK:
                return self.send(200, json.dumps(STATS))
        if url.path == "/release":
            RELEASED.set()
            return self.send(200, "{}")
        if len(parts) != 2:
            return self.send(404, '{"error":"not found"}')
        name, rest = parts
        base = f"http://{self.headers['Host']}/{name}"
        state = tenant(name)
        if rest == ".well-known/openid-configuration":
            with LOCK:
                STATS["discovery_fetches"][name] = STATS["discovery_fetches"].get(name, 0) + 1
            if name == "held":
                print("held", flush=True)
                RELEASED.wait(timeout=600)
            jwks_uri = "http://127.0.0.1:1/jwks" if name == "broken" else base + "/.well-known/jwks"
            return self.send(200, json.dumps({
                "issuer": base if name != "liar" else "https://someone-else.example",
                "jwks_uri": jwks_uri,
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public", "pairwise"],
                "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            }))
        if rest == ".well-known/jwks":
            with LOCK:
                STATS["jwks_fetches"][name] = STATS["jwks_fetches"].get(name, 0) + 1
                keys = [k.as_dict(private=False) for generation in state["keys"] for k in generation.values()]
            return self.send(200, json.dumps({"keys": keys}))
        if rest == "rotate":
            with LOCK:
                state["generation"] += 1
                state["keys"].append(new_keys(state["generation"]))
            return self.send(200, "{}")
        if rest == "token":
            return self.send(200, self.token(base, state, query), "text/plain")
        return self.send(404, '{"error":"not found"}')

    def token(self, base, state, query):
        now = int(time.time())
        claims = {
            "jti": query.get("jti") or secrets.token_hex(16),
            "sub": query.get("sub", "repo:acme/api:ref:refs/heads/main"),
            "aud": query.get("aud", "broker"),
            "ref": "refs/heads/main",
            "sha": "a" * 40,
            "repository": "acme/api",
            "repository_owner": "acme",
            "run_id": "1234567890",
            "workflow": "deploy",
            "event_name": "push",
            "iss": query.get("iss", base),
            "iat": now + int(query.get("iat", "0")),
            "nbf": now + int(query.get("nbf", "0")),
            "exp": now + int(query.get("exp", "300")),
        }
        for name, value in json.loads(query.get("claims", "{}")).items():
            if value is None:
                claims.pop(name, None)
            else:
                claims[name] = value
        variant = query.get("variant", "")
        if variant == "no-jti":
            del claims["jti"]
        alg = query.get("alg", "RS256")
        with LOCK:
            key = state["keys"][-1][alg]
        if variant == "none":
            header = {"alg": "none", "typ": "JWT"}
            return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}."
        if variant == "hs256":
            header = {"alg": "HS256", "typ": "JWT", "kid": key.kid}
            signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
            pem = key.as_pem(private=False)
            signature = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
            return f"{signing_input}.{b64(signature)}"
        if variant == "unknown-kid":
            key = new_keys(99)[alg]
            key = (RSAKey if alg == "RS256" else ECKey).import_key(
                key.as_dict(private=True) | {"kid": "not-published"})
        header = {"alg": alg, "typ": "JWT", "kid": key.kid}
        return jwt.encode(header, claims, key)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"issuer-base http://127.0.0.1:{server.server_address[1]}", flush=True)
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
