#!/usr/bin/env python3
"""An OpenID Provider built on Authlib's server side (authlib.integrations.flask_oauth2: the authorization code
grant, PKCE, the OpenID Connect code flow's ID token, RFC 7523 client assertions) — code we did not write — as
the upstream of a broker's provider of `"type": "oidc"`.

Usage: authlib_provider.py CLIENT_ID REDIRECT_URI (--secret SECRET | --client-jwk FILE)
  REDIRECT_URI may hold a * (fnmatch) for the port of a broker started after this server.
  --secret: the client authenticates with client_secret_basic; --client-jwk: with private_key_jwt, against
  the public JWK in FILE.
Prints "listening http://127.0.0.1:PORT" once serving; serves until stdin closes. Its issuer is that URL.
Routes: /.well-known/openid-configuration, /jwks, /authorize (GET: a consent form — hidden fields, an account,
a decision — as browser_flow.py plays it; POST: Authlib's answer), /token, /userinfo, POST /rotate (a new
signing key, published beside the old one).
A `fault` on the authorize request flaws that sign-in's ID token, for the broker's checks: issuer, audience,
nonce, expired, resigned (another key under the current kid), unknown-kid.
"""
import fnmatch
import html
import json
import os
import secrets
import sys
import threading
import time

os.closerange(3, os.sysconf("SC_OPEN_MAX"))

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import grants
from authlib.oauth2.rfc7523 import JWTBearerClientAssertion
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from flask import Flask, jsonify, request
from joserfc.jwk import ECKey, RSAKey
from werkzeug.serving import make_server

CLIENT_ID, REDIRECT_URI = sys.argv[1], sys.argv[2]
SECRET = sys.argv[sys.argv.index("--secret") + 1] if "--secret" in sys.argv else None
CLIENT_JWK = None
if "--client-jwk" in sys.argv:
    with open(sys.argv[sys.argv.index("--client-jwk") + 1]) as f:
        CLIENT_JWK = json.load(f)

USERS = {
    "ada": {"sub": "authlib-ada-0001", "name": "Ada Authlib", "email": "ada@upstream.example", "email_verified": True},
    "eve": {"sub": "authlib-eve-0002", "name": "Eve Unverified", "email": "eve@upstream.example",
            "email_verified": False},
}
KEYS = [RSAKey.generate_key(2048, parameters={"kid": secrets.token_hex(8), "use": "sig", "alg": "RS256"})]
CODES, TOKENS = {}, {}
CURRENT = threading.local()
app = Flask(__name__)
ISSUER = ""


class Client:
    def get_client_id(self): return CLIENT_ID
    def get_default_redirect_uri(self): return None
    def get_allowed_scope(self, scope): return " ".join(s for s in scope.split() if s in ("openid", "email", "profile"))
    def check_redirect_uri(self, redirect_uri): return fnmatch.fnmatchcase(redirect_uri, REDIRECT_URI)
    def check_client_secret(self, client_secret): return SECRET is not None and secrets.compare_digest(client_secret, SECRET)
    def check_response_type(self, response_type): return response_type == "code"
    def check_grant_type(self, grant_type): return grant_type == "authorization_code"

    def check_endpoint_auth_method(self, method, endpoint):
        return method == ("client_secret_basic" if SECRET else "private_key_jwt")


class Code:
    def __init__(self, **fields): self.__dict__.update(fields)
    def get_redirect_uri(self): return self.redirect_uri
    def get_scope(self): return self.scope
    def get_nonce(self): return self.nonce
    def get_auth_time(self): return self.auth_time
    def get_acr(self): return None
    def get_amr(self): return None
    def is_expired(self): return time.time() > self.auth_time + 300


class CodeGrant(grants.AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "private_key_jwt"]

    def save_authorization_code(self, code, req):
        data = req.payload.data
        CODES[code] = Code(
            code=code, client_id=CLIENT_ID, redirect_uri=req.payload.redirect_uri, scope=req.payload.scope,
            user=req.user, nonce=data.get("nonce"), code_challenge=data.get("code_challenge"),
            code_challenge_method=data.get("code_challenge_method"), auth_time=int(time.time()),
            fault=data.get("fault"))

    def query_authorization_code(self, code, client):
        found = CODES.get(code)
        return found if found and not found.is_expired() else None

    def delete_authorization_code(self, authorization_code): CODES.pop(authorization_code.code, None)
    def authenticate_user(self, authorization_code): return authorization_code.user

    def create_token_response(self):
        # The sign-in's fault, for the ID token hooks below.
        code = CODES.get(self.request.payload.data.get("code"))
        CURRENT.fault = code.fault if code else None
        return super().create_token_response()


class OpenIDCodeFlow(OpenIDCode):
    def exists_nonce(self, nonce, req): return False
    def get_client_algorithm(self, client): return "RS256"

    def signing_key(self):
        if getattr(CURRENT, "fault", None) in ("resigned", "unknown-kid"):
            return RSAKey.generate_key(2048)
        return KEYS[0]

    def resolve_client_private_key(self, client): return self.signing_key()

    def get_encode_header(self, client):
        kid = "never-published" if getattr(CURRENT, "fault", None) == "unknown-kid" else KEYS[0].kid
        return {"alg": "RS256", "kid": kid}

    def get_client_claims(self, client):
        fault, now = getattr(CURRENT, "fault", None), int(time.time())
        claims = {"iss": "https://issuer.invalid" if fault == "issuer" else ISSUER,
                  "aud": ["someone-elses-client" if fault == "audience" else CLIENT_ID],
                  "iat": now, "exp": now + 600}
        if fault == "expired":
            claims.update(iat=now - 7200, exp=now - 3600)
        return claims

    def get_authorization_code_claims(self, authorization_code):
        claims = super().get_authorization_code_claims(authorization_code)
        if getattr(CURRENT, "fault", None) == "nonce":
            claims["nonce"] = "not-the-nonce"
        return claims

    def generate_user_info(self, user, scope):
        return UserInfo(sub=user["sub"], name=user["name"], email=user["email"], email_verified=user["email_verified"])


class PrivateKeyJWT(JWTBearerClientAssertion):
    CLIENT_AUTH_METHOD = "private_key_jwt"
    def get_audiences(self): return [ISSUER + "/token", ISSUER]
    def validate_jti(self, claims, jti): return True

    def resolve_client_public_key(self, client):
        return (ECKey if CLIENT_JWK["kty"] == "EC" else RSAKey).import_key(CLIENT_JWK)


def save_token(token, req):
    TOKENS[token["access_token"]] = req.user


server = AuthorizationServer(app, query_client=lambda client_id: Client() if client_id == CLIENT_ID else None,
                             save_token=save_token)
server.register_grant(CodeGrant, [CodeChallenge(required=True), OpenIDCodeFlow(require_nonce=True)])
server.register_client_auth_method(PrivateKeyJWT.CLIENT_AUTH_METHOD, PrivateKeyJWT())


@app.get("/.well-known/openid-configuration")
def discovery():
    return jsonify(issuer=ISSUER, authorization_endpoint=ISSUER + "/authorize", token_endpoint=ISSUER + "/token",
                   userinfo_endpoint=ISSUER + "/userinfo", jwks_uri=ISSUER + "/jwks",
                   response_types_supported=["code"], subject_types_supported=["public"],
                   id_token_signing_alg_values_supported=["RS256"], code_challenge_methods_supported=["S256"],
                   token_endpoint_auth_methods_supported=["client_secret_basic", "private_key_jwt"])


@app.get("/jwks")
def jwks():
    return jsonify(keys=[key.as_dict(private=False) for key in KEYS])


@app.post("/rotate")
def rotate():
    KEYS.insert(0, RSAKey.generate_key(2048, parameters={"kid": secrets.token_hex(8), "use": "sig", "alg": "RS256"}))
    del KEYS[2:]
    return jsonify(kid=KEYS[0].kid)


@app.get("/authorize")
def authorize_page():
    try:
        server.get_consent_grant(end_user=None)
    except Exception as error:  # Authlib's own refusal of the request, as a page.
        return "<!doctype html><title>refused</title><p>%s</p>" % html.escape(str(error)), 400
    hidden = "".join('<input type="hidden" name="%s" value="%s">' % (html.escape(k), html.escape(v))
                     for k, v in request.args.items())
    users = "".join('<label><input type="radio" name="account" value="%s">%s</label>' % (k, html.escape(v["name"]))
                    for k, v in USERS.items())
    return ('<!doctype html><title>Authlib provider</title><form method="post" action="/authorize">%s%s'
            '<button name="decision" value="allow">Allow</button><button name="decision" value="deny">Deny</button>'
            '</form>' % (hidden, users))


@app.post("/authorize")
def authorize():
    user = USERS.get(request.form.get("account", "")) if request.form.get("decision") == "allow" else None
    return server.create_authorization_response(grant_user=user)


@app.post("/token")
def token():
    return server.create_token_response()


@app.get("/userinfo")
def userinfo():
    bearer = request.headers.get("Authorization", "")
    user = TOKENS.get(bearer[7:]) if bearer.startswith("Bearer ") else None
    if user is None:
        return jsonify(error="invalid_token"), 401
    return jsonify(sub=user["sub"], name=user["name"], email=user["email"], email_verified=user["email_verified"])


def main():
    global ISSUER
    http = make_server("127.0.0.1", 0, app, threaded=True)
    ISSUER = "http://127.0.0.1:%d" % http.server_port
    threading.Thread(target=http.serve_forever, daemon=True).start()
    print("listening " + ISSUER, flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
