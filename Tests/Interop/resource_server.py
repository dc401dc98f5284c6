#!/usr/bin/env python3
"""An API and a git server that trust the broker's tokens, as a third party would: joserfc verifies each
token against the broker's published JWKS (signature, alg bound to the key, typ at+jwt, iss, aud, exp, nbf),
and the broker says whether its session still stands (revocation: introspection with RS_INTROSPECT_CLIENT, else
/auth/me). A token sent as DPoP (RFC 9449) must come with a proof, checked as a resource server checks it.

Usage: resource_server.py --broker URL --issuer ISS [--git-root DIR] [--protected PATH=RESOURCE]...
Prints "resource server listening on http://127.0.0.1:PORT" once listening; serves until stdin closes.

  /api/...              Bearer token → 200 {"sub", "method", "path", "body_sha256", "body_length"};
                        else 401 with WWW-Authenticate: Bearer error="invalid_token"
  /api/redirect?to=URL  (authenticated) 302 to URL
  /open/...             no authentication; records what arrived (for redirects to another origin)
  /git/...              git smart HTTP (git http-backend over GIT_PROJECT_ROOT=--git-root); Basic
                        authentication whose password is a broker token; else 401 (Basic realm)
  --protected PATH=RESOURCE  the requests under PATH (/api/one, /git) are one API of its own (RFC 8707, RFC 9728):
                        their tokens' aud must be RESOURCE ("{base}" in it is this server's URL), a DPoP-bound
                        token must come as DPoP, and a 401 names the metadata published at
                        /.well-known/oauth-protected-resource + PATH ({"resource", "authorization_servers"})
  --step-up PATH=acr:VALUES  the requests under PATH need a sign-in of one of the acr VALUES (comma-separated)
  --step-up PATH=max_age:N   … or one made within N seconds (its auth_time; judged at /_control/auth_now) —
                        else 401 with RFC 9470's WWW-Authenticate: Bearer error="insufficient_user_authentication",
                        acr_values="…" and/or max_age=N, as the README tells an API to answer
  POST /_control/auth_now  body: epoch seconds sign-ins' ages are judged at ("real" for the real clock)
  POST /_control/now    body: epoch seconds the tokens' exp/nbf are judged at ("real" for the real clock)
  POST /_control/trust  body: JSON list of the kids trusted from now on (null: every published key)
  POST /_control/dpop_nonce  body: a nonce every request must then bring in a DPoP proof (null: none asked)
  GET  /_control/log    JSON list of {"path", "status", "authorization", "api_key" (X-Api-Key), "host"} for every request so far
"""
import argparse
import base64
import gzip
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

warnings.simplefilter("ignore")

from joserfc import jwt  # noqa: E402
from joserfc.errors import JoseError  # noqa: E402
from joserfc.jwk import JWKRegistry, KeySet  # noqa: E402

STATE = {"now": None, "trusted": None, "dpop_nonce": None, "auth_now": None}
SEEN_PROOFS = set()
LOG = []
LOCK = threading.RLock()


class Refused(Exception):
    pass


class NonceRequired(Exception):
    def __init__(self, nonce):
        super().__init__(nonce)
        self.nonce = nonce


def fetch_json(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


BASE = []
PROTECTED = []
STEP_UP = []


def step_up_challenge(path, claims):
    """RFC 9470: the WWW-Authenticate value asking for more when the token's sign-in does not meet what PATH
    needs, else None."""
    for prefix, need in STEP_UP:
        if not (path == prefix or path.startswith(prefix + "/") or path.startswith(prefix + "?")):
            continue
        kind, _, value = need.partition(":")
        if kind == "acr" and claims.get("acr") not in value.split(","):
            return (f'Bearer error="insufficient_user_authentication", error_description="this call needs a '
                    f'stronger sign-in", acr_values="{value.replace(",", " ")}"')
        if kind == "max_age":
            with LOCK:
                now = STATE["auth_now"] if STATE["auth_now"] is not None else time.time()
            if "auth_time" not in claims or now - claims["auth_time"] > int(value):
                return (f'Bearer error="insufficient_user_authentication", error_description="this call needs a '
                        f'recent sign-in", max_age={int(value)}')
    return None


def protected_entry(path):
    """The (PATH, RESOURCE) of --protected covering `path`, else None (the APIs' audience, "broker")."""
    for prefix, resource in PROTECTED:
        if path == prefix or path.startswith(prefix + "/") or path.startswith(prefix + "?"):
            return prefix, resource
    return None


def challenge_suffix(path):
    entry = protected_entry(path)
    if entry is None:
        return ""
    return f', resource_metadata="{BASE[0]}/.well-known/oauth-protected-resource{entry[0]}"'


def verify(token, args, path="/"):
    """The claims of a token this API accepts, else Refused with the reason."""
    jwks = fetch_json(args.broker + "/.well-known/jwks.json")
    with LOCK:
        trusted, now = STATE["trusted"], STATE["now"]
    keys = [k for k in jwks["keys"] if trusted is None or k["kid"] in trusted]
    try:
        header = json.loads(_b64(token.split(".")[0]))
    except Exception:
        raise Refused("not a JWS")
    entry = next((k for k in keys if k["kid"] == header.get("kid")), None)
    if entry is None:
        raise Refused("unknown key")
    if header.get("typ") != "at+jwt":
        raise Refused("not an access token")
    try:
        decoded = jwt.decode(token, KeySet.import_key_set({"keys": [entry]}), algorithms=[entry["alg"]])
        registry = jwt.JWTClaimsRegistry(
            now=int(now) if now is not None else None,
            leeway=0,
            iss={"essential": True, "value": args.issuer},
            aud={"essential": True, "value": (protected_entry(path) or (None, "broker"))[1]},
            sub={"essential": True},
            exp={"essential": True},
        )
        registry.validate(decoded.claims)
    except JoseError as error:
        raise Refused(f"{type(error).__name__}: {error}")
    # Revoked sessions: the broker's own view of the token. With client credentials (RS_INTROSPECT_CLIENT=id:secret
    # in the environment) through introspection (RFC 7662) — what an API does with DPoP-bound tokens, which it
    # cannot present to /auth/me as Bearer — else through /auth/me.
    credentials = os.environ.get("RS_INTROSPECT_CLIENT")
    try:
        if credentials:
            request = urllib.request.Request(
                args.broker + "/auth/introspect", data=urllib.parse.urlencode({"token": token}).encode(),
                headers={"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode(),
                         "Content-Type": "application/x-www-form-urlencoded"})
            with urllib.request.urlopen(request, timeout=120) as response:
                if not json.load(response).get("active"):
                    raise Refused("the broker says the token is not active")
        else:
            fetch_json(args.broker + "/auth/me", {"Authorization": "Bearer " + token})
    except urllib.error.HTTPError as error:
        raise Refused(f"the broker says {error.code}")
    return decoded.claims


def _b64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    args = None

    def log_message(self, *args):
        pass

    def record(self, status):
        if self.path.startswith("/_control/"):
            return
        with LOCK:
            LOG.append({
                "path": self.path, "method": self.command, "status": status,
                "authorization": self.headers.get("Authorization"),
                "api_key": self.headers.get("X-Api-Key"), "host": self.headers.get("Host"),
            })

    def reply(self, status, body=b"", headers=()):
        self.record(status)
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self):
        self.route()

    def do_POST(self):
        self.route()

    def do_PUT(self):
        self.route()

    def do_DELETE(self):
        self.route()

    def do_HEAD(self):
        self.route()

    def route(self):
        path = self.path.split("?")[0]
        if path.startswith("/_control/"):
            return self.control(path)
        if path.startswith("/open/"):
            self.body()
            return self.reply(200, {"path": self.path})
        if path.startswith("/git/"):
            return self.git()
        if path.startswith("/api/"):
            return self.api()
        if path.startswith("/.well-known/oauth-protected-resource/"):
            entry = protected_entry(path[len("/.well-known/oauth-protected-resource"):])
            if entry is not None:
                return self.reply(200, {
                    "resource": entry[1], "authorization_servers": [self.args.issuer],
                    "bearer_methods_supported": ["header"]}, [("Content-Type", "application/json")])
        self.reply(404, {"error": "not_found"})

    def control(self, path):
        if path == "/_control/log":
            with LOCK:
                return self.reply(200, list(LOG))
        value = json.loads(self.body() or b"null")
        with LOCK:
            if path == "/_control/now":
                STATE["now"] = None if value == "real" else value
            elif path == "/_control/auth_now":
                STATE["auth_now"] = None if value == "real" else value
            elif path == "/_control/trust":
                STATE["trusted"] = value
            elif path == "/_control/dpop_nonce":
                STATE["dpop_nonce"] = value
            else:
                return self.reply(404, {"error": "not_found"})
        self.reply(204)

    def check_proof(self, token, claims):
        """RFC 9449 §4.3 and §7.1 as a resource server checks them, with joserfc: the DPoP header's proof
        signed by the key its header carries, that key the token's cnf.jkt, for this method and URL, with this
        token's ath, never seen before, and the nonce when this API asks for one."""
        proofs = self.headers.get_all("DPoP") or []
        if len(proofs) != 1:
            raise Refused("exactly one DPoP proof is required")
        try:
            header = json.loads(_b64(proofs[0].split(".")[0]))
            key = JWKRegistry.import_key(header["jwk"])
            decoded = jwt.decode(proofs[0], key, algorithms=[header["alg"]])
        except Exception as error:
            raise Refused(f"the DPoP proof does not verify: {error}")
        proof = decoded.claims
        if header.get("typ") != "dpop+jwt":
            raise Refused("not a DPoP proof")
        if key.thumbprint() != claims.get("cnf", {}).get("jkt"):
            raise Refused("the proof's key is not the token's")
        url = "http://" + self.headers.get("Host", "") + self.path.split("?")[0]
        if proof.get("htm") != self.command or proof.get("htu") != url:
            raise Refused("the proof is for another request")
        ath = base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest()).rstrip(b"=").decode()
        if proof.get("ath") != ath:
            raise Refused("the proof is for another token")
        with LOCK:
            if proof.get("jti") in SEEN_PROOFS:
                raise Refused("the proof was used before")
            SEEN_PROOFS.add(proof.get("jti"))
            nonce = STATE["dpop_nonce"]
        if nonce is not None and proof.get("nonce") != nonce:
            raise NonceRequired(nonce)

    def api(self):
        body = self.body()
        authorization = self.headers.get("Authorization") or ""
        dpop = authorization.startswith("DPoP ")
        suffix = challenge_suffix(self.path)
        if not authorization.startswith("Bearer ") and not dpop:
            return self.reply(
                401, {"error": "invalid_token"}, [("WWW-Authenticate", 'Bearer realm="api"' + suffix)])
        try:
            claims = verify(authorization[5 if dpop else 7:], self.args, self.path)
            if dpop:
                self.check_proof(authorization[5:], claims)
            elif protected_entry(self.path) is not None and "cnf" in claims:
                raise Refused("a DPoP-bound token must come with its proof")
            elif STATE["dpop_nonce"] is not None:
                # A DPoP-only API's challenge to a Bearer presentation (RFC 9449 §7.1), with the nonce it wants.
                with LOCK:
                    nonce = STATE["dpop_nonce"]
                return self.reply(
                    401, {"error": "invalid_token", "error_description": "this API takes DPoP only"},
                    [("WWW-Authenticate", 'DPoP algs="ES256 EdDSA RS256", error="invalid_token"'),
                     ("DPoP-Nonce", nonce)])
        except NonceRequired as asked:
            return self.reply(
                401, {"error": "use_dpop_nonce"},
                [("WWW-Authenticate", 'DPoP error="use_dpop_nonce"'), ("DPoP-Nonce", asked.nonce)])
        except Refused as reason:
            return self.reply(
                401, {"error": "invalid_token", "error_description": str(reason)},
                [("WWW-Authenticate", f'Bearer error="invalid_token", error_description="{reason}"' + suffix)])
        asked = step_up_challenge(self.path, claims)
        if asked is not None:
            return self.reply(401, {"error": "insufficient_user_authentication"}, [("WWW-Authenticate", asked)])
        if self.path.startswith("/api/redirect?to="):
            target = urllib.parse.unquote(self.path.split("to=", 1)[1])
            return self.reply(302, b"", [("Location", target)])
        self.reply(200, {
            "sub": claims["sub"], "acr": claims.get("acr"), "method": self.command, "path": self.path,
            "body_sha256": hashlib.sha256(body).hexdigest(), "body_length": len(body),
        }, [("Content-Type", "application/json")])

    def git(self):
        authorization = self.headers.get("Authorization") or ""
        user = None
        if authorization.startswith("Basic "):
            try:
                user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
                claims = verify(password, self.args, self.path)
                if protected_entry(self.path) is not None and "cnf" in claims:
                    raise Refused("a DPoP-bound token cannot come as a password")
                user = claims["sub"]
            except (Refused, ValueError):
                user = None
        if user is None:
            self.body()
            return self.reply(401, b"authentication required\n", [("WWW-Authenticate", 'Basic realm="git"')])
        path, _, query = self.path[len("/git"):].partition("?")
        environment = dict(os.environ)
        environment.update({
            "GIT_PROJECT_ROOT": self.args.git_root, "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": self.command,
            "PATH_INFO": path, "QUERY_STRING": query, "REMOTE_USER": user, "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_TYPE": self.headers.get("Content-Type") or "",
            "GIT_PROTOCOL": self.headers.get("Git-Protocol") or "",
        })
        body = self.body()
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        environment["CONTENT_LENGTH"] = str(len(body))
        result = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=environment)
        head, _, payload = result.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode().split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.reply(status, payload, headers)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--broker", required=True)
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--git-root")
    parser.add_argument("--protected", action="append", default=[])
    parser.add_argument("--step-up", action="append", default=[])
    args = parser.parse_args()
    for entry in args.step_up:
        path, _, need = entry.partition("=")
        STEP_UP.append((path, need))
    Handler.args = args
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    BASE.append(f"http://127.0.0.1:{server.server_address[1]}")
    for entry in args.protected:
        path, _, resource = entry.partition("=")
        PROTECTED.append((path, resource.replace("{base}", BASE[0])))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"resource server listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
