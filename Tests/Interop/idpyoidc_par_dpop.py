#!/usr/bin/env python3
"""An app written with idpyoidc (code we did not write) against a running broker: a pushed authorization request
(RFC 9126) made with idpyoidc's AuthorizationRequest message and its client_secret_basic authentication, redeemed
once and then refused; a code grant with a DPoP proof from idpyoidc's DPoP add-on (its key, its proof), so the
access token is bound to idpyoidc's key (cnf.jkt is the key's RFC 7638 thumbprint as cryptojwt computes it);
userinfo with a fresh proof (idpyoidc's DPoPProof message, signed by its key) accepted, and refused as Bearer, with
a replayed proof, with a proof for another URL or method, and with the add-on's own resource proof, whose `ath`
is hex where RFC 9449 §4.2 says base64url.

Then the app signs out at broker's end_session_endpoint with its id token as hint, and its back-channel receiver
(on RECEIVER_PORT, registered as the app's backchannel_logout_uri http://127.0.0.1:RECEIVER_PORT/backchannel)
gets a logout token, checked with joserfc against the JWKS: typ logout+jwt, iss, aud, iat, exp, jti, the
back-channel event, the id token's sid and sub, and no nonce.

Usage: idpyoidc_par_dpop.py BROKER_URL WEB_SECRET EMAIL PASSWORD RECEIVER_PORT
  (app "web", redirect https://web.example/callback)
Prints one JSON object with what each step saw; exits 1 with the reason on the first surprise.
"""
import base64
import hashlib
import json
import sys
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests
from cryptojwt.key_bundle import key_by_alg
from joserfc import jwt
from joserfc.jwk import KeySet
from idpyoidc.client.oauth2.add_on import dpop as dpop_add_on
from idpyoidc.message.oauth2 import AuthorizationRequest
from idpyoidc.message.oauth2 import JWTSecuredAuthorizationRequest
from idpyoidc.time_util import utc_time_sans_frac

import broker_pages

REDIRECT = "https://web.example/callback"


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def follow_to_app(browser, response):
    for _ in range(10):
        location = response.headers.get("Location") or broker_pages.parse(response.text).refresh
        if location is None:
            return None
        location = urllib.parse.urljoin(response.url, location)
        if location.startswith(REDIRECT):
            return location
        response = browser.get(location, allow_redirects=False)
    fail("too many hops")


class Context:
    """What idpyoidc's dpop_header reads of a client's service context: its DPoP configuration and endpoints."""

    def __init__(self, provider_info, key):
        self.provider_info = provider_info
        self.add_on = {"dpop": {"key": key, "alg": "ES256", "algs_supported": ["ES256"]}}


def proof(key, method, url, token=None):
    """A proof with idpyoidc's own message class and key, `ath` as RFC 9449 says (base64url SHA-256)."""
    fields = {"typ": "dpop+jwt", "alg": "ES256", "jwk": key.serialize(), "jti": uuid.uuid4().hex, "htm": method,
              "htu": url, "iat": utc_time_sans_frac()}
    if token:
        fields["ath"] = base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest()).rstrip(b"=").decode()
    message = dpop_add_on.DPoPProof(**fields)
    message.key = key
    return message.create_header()


RECEIVED = []
ARRIVED = threading.Event()


class Receiver(BaseHTTPRequestHandler):
    """The app's back-channel logout endpoint (Back-Channel Logout 1.0 §2.5)."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
        RECEIVED.append({"content_type": self.headers.get("Content-Type"), "logout_token": form.get("logout_token")})
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        ARRIVED.set()


def main():
    broker, secret, email, password, receiver_port = sys.argv[1:6]
    receiver = ThreadingHTTPServer(("127.0.0.1", int(receiver_port)), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    seen = {}
    discovery = requests.get(broker + "/.well-known/openid-configuration").json()
    for key in ["pushed_authorization_request_endpoint", "dpop_signing_alg_values_supported"]:
        if key not in discovery:
            fail("discovery lacks " + key)
    basic = "Basic " + base64.b64encode(f"web:{secret}".encode()).decode()

    # PAR: the request as idpyoidc builds it, pushed with client_secret_basic.
    verifier = uuid.uuid4().hex + uuid.uuid4().hex
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    request = AuthorizationRequest(
        response_type="code", client_id="web", redirect_uri=REDIRECT, scope=["openid", "email"], state="par-state",
        nonce=uuid.uuid4().hex, code_challenge=challenge, code_challenge_method="S256")
    request.verify()
    pushed = requests.post(
        discovery["pushed_authorization_request_endpoint"], data=request.to_urlencoded(),
        headers={"Authorization": basic, "Content-Type": "application/x-www-form-urlencoded"})
    seen["par_status"] = pushed.status_code
    if pushed.status_code != 201:
        fail("PAR: %s %s" % (pushed.status_code, pushed.text))
    request_uri = pushed.json()["request_uri"]
    seen["par_expires_in"] = pushed.json()["expires_in"]
    unauthenticated = requests.post(
        discovery["pushed_authorization_request_endpoint"], data=request.to_urlencoded(),
        headers={"Content-Type": "application/x-www-form-urlencoded"})
    seen["par_without_client_auth"] = unauthenticated.status_code

    # As idpyoidc's PAR add-on builds the front-channel request: the request_uri and the required parameters.
    front = JWTSecuredAuthorizationRequest(request_uri=request_uri)
    for name in request.required_parameters():
        front[name] = request[name]
    url = discovery["authorization_endpoint"] + "?" + front.to_urlencoded()
    browser = requests.Session()
    page = browser.get(url, allow_redirects=False)
    if page.status_code != 200:
        fail("the pushed request was not accepted: %s %s" % (page.status_code, page.text[:300]))
    consent = broker_pages.sign_in(browser, broker, page, email, password)
    answered = broker_pages.allow(browser, broker, consent) if "Allow web?" in consent.text else consent
    back = follow_to_app(browser, answered)
    if back is None:
        fail("no way back to the app")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(back).query))
    seen["state"] = query.get("state")
    seen["second_use_status"] = requests.get(url, allow_redirects=False).status_code

    # The code grant with the DPoP add-on's proof (its key, minted by idpyoidc).
    key = key_by_alg("ES256")
    context = Context(discovery, key)
    headers = dpop_add_on.dpop_header(context, "token_endpoint", "POST")
    headers.update({"Authorization": basic, "Content-Type": "application/x-www-form-urlencoded"})
    token = requests.post(discovery["token_endpoint"], headers=headers, data={
        "grant_type": "authorization_code", "code": query["code"], "redirect_uri": REDIRECT,
        "code_verifier": verifier})
    if token.status_code != 200:
        fail("token: %s %s" % (token.status_code, token.text))
    answer = token.json()
    seen["token_type"] = answer["token_type"]
    access = answer["access_token"]
    claims = json.loads(base64.urlsafe_b64decode(access.split(".")[1] + "=="))
    seen["cnf_is_idpyoidc_key"] = claims.get("cnf", {}).get("jkt") == key.thumbprint("SHA-256").decode()

    userinfo = discovery["userinfo_endpoint"]
    good = proof(key, "GET", userinfo, access)
    seen["userinfo_dpop"] = requests.get(userinfo, headers={"Authorization": "DPoP " + access, "DPoP": good}).status_code
    seen["userinfo_replayed"] = requests.get(
        userinfo, headers={"Authorization": "DPoP " + access, "DPoP": good}).status_code
    seen["userinfo_bearer"] = requests.get(userinfo, headers={"Authorization": "Bearer " + access}).status_code
    seen["userinfo_other_url"] = requests.get(userinfo, headers={
        "Authorization": "DPoP " + access, "DPoP": proof(key, "GET", broker + "/auth/me", access)}).status_code
    seen["userinfo_other_method"] = requests.get(userinfo, headers={
        "Authorization": "DPoP " + access, "DPoP": proof(key, "POST", userinfo, access)}).status_code
    add_on_proof = dpop_add_on.dpop_header(context, "userinfo_endpoint", "GET", token=access)["dpop"]
    seen["userinfo_add_on_hex_ath"] = requests.get(
        userinfo, headers={"Authorization": "DPoP " + access, "DPoP": add_on_proof}).status_code

    # RP-initiated logout with the id token as hint; the back-channel logout token arrives at the receiver.
    keys = KeySet.import_key_set(requests.get(discovery["jwks_uri"]).json())
    id_claims = jwt.decode(answer["id_token"], keys).claims
    out = browser.get(discovery["end_session_endpoint"], params={"id_token_hint": answer["id_token"]},
                      allow_redirects=False)
    seen["end_session_status"] = out.status_code
    if not ARRIVED.wait(60):
        fail("no logout token arrived")
    delivery = RECEIVED[0]
    seen["logout_content_type"] = delivery["content_type"]
    decoded = jwt.decode(delivery["logout_token"], keys)
    claims = decoded.claims
    jwt.JWTClaimsRegistry(
        iss={"essential": True, "value": broker}, aud={"essential": True, "value": "web"},
        iat={"essential": True}, exp={"essential": True}, jti={"essential": True},
        sid={"essential": True, "value": id_claims["sid"]}, sub={"essential": True, "value": id_claims["sub"]},
    ).validate(claims)
    seen["logout_typ"] = decoded.header.get("typ")
    seen["logout_alg"] = decoded.header.get("alg")
    seen["logout_event"] = claims.get("events", {}).get("http://schemas.openid.net/event/backchannel-logout")
    seen["logout_has_nonce"] = "nonce" in claims
    receiver.shutdown()
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
