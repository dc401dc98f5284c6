#!/usr/bin/env python3
"""Two apps that sign their users in through a running broker, written with Authlib (code we did not write):
discovery, the authorization code flow with PKCE and a nonce, the id token verified with joserfc against the
broker's JWKS, userinfo by GET and POST, single sign-on between the two apps, and prompt=none with and
without a browser session. The "browser" is a requests.Session that keeps cookies and submits the broker's
forms as a person would (the sign-in page, the consent page).

A third app, "keyed", has no secret: it authenticates with private_key_jwt (RFC 7523, Authlib's PrivateKeyJWT)
signed by a P-256 key joserfc made (`--make-key DIR` writes DIR/private.json and DIR/public.json, the JWK Set the
test registers with `broker client add … --jwks-file`), and asks for claims one by one (the claims parameter).

Usage: oidc_relying_party.py BROKER_URL WEB_SECRET EMAIL PASSWORD KEY_DIR
       oidc_relying_party.py --make-key DIR
  app "web"    (confidential, redirect https://web.example/callback, not first-party)
  app "native" (public, redirect http://127.0.0.1/callback, any port)
  app "keyed"  (private_key_jwt, redirect https://keyed.example/callback)
Prints one JSON object with what each step saw; exits 1 with the reason on the first surprise.
"""
import json
import sys
import urllib.parse

import os

import requests
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session
from authlib.oauth2.rfc7523 import ClientSecretJWT, PrivateKeyJWT, private_key_jwt_sign
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet

import broker_pages


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def follow_to_app(browser, response, app_prefix):
    """Follows the broker's redirects and onward pages until the app's redirect URI; returns that URL."""
    for _ in range(10):
        location = response.headers.get("Location")
        if location is None:
            location = broker_pages.parse(response.text).refresh
        if location is None:
            return None, response
        location = urllib.parse.urljoin(response.url, location)
        if location.startswith(app_prefix):
            return location, response
        response = browser.get(location, allow_redirects=False)
    fail("too many hops")


def make_key(directory):
    key = ECKey.generate_key("P-256")
    with open(os.path.join(directory, "private.json"), "w") as f:
        json.dump(key.as_dict(private=True), f)
    with open(os.path.join(directory, "public.json"), "w") as f:
        json.dump({"keys": [key.as_dict(private=False)]}, f)


def keyed_app(broker, discovery, browser, keys, key_dir):
    """The app "keyed": private_key_jwt at the token endpoint, the claims parameter at the authorization endpoint
    (email in the id token, name at userinfo, with only the openid scope). Returns what it saw."""
    with open(os.path.join(key_dir, "private.json")) as f:
        private = ECKey.import_key(json.load(f))
    redirect = "https://keyed.example/callback"
    keyed = OAuth2Session(
        "keyed", private, scope="openid", redirect_uri=redirect, code_challenge_method="S256",
        token_endpoint_auth_method=PrivateKeyJWT(discovery["token_endpoint"], alg="ES256"))
    verifier = generate_token(48)
    claims = {"id_token": {"email": None, "acr": {"values": ["1", "2"]}}, "userinfo": {"name": {"essential": True}}}
    url, state = keyed.create_authorization_url(
        discovery["authorization_endpoint"], code_verifier=verifier, nonce=generate_token(20),
        claims=json.dumps(claims), acr_values="1")
    response = browser.get(url, allow_redirects=False)
    if "Allow keyed?" in response.text:
        response = broker_pages.allow(browser, broker, response)
    back, stopped = follow_to_app(browser, response, redirect)
    if back is None:
        fail("the keyed app's sign-in did not come back: %s" % stopped.text[:300])
    token = keyed.fetch_token(discovery["token_endpoint"], authorization_response=back, code_verifier=verifier)
    id_claims = jwt.decode(token["id_token"], keys).claims
    seen = {
        "keyed_id_token_email": id_claims.get("email"), "keyed_id_token_name": id_claims.get("name"),
        "keyed_acr": id_claims.get("acr"), "keyed_amr": id_claims.get("amr"),
        "keyed_userinfo": keyed.get(discovery["userinfo_endpoint"]).json(),
    }
    # The same assertion twice: Authlib makes a fresh one (a new jti) per request, so a replay is sent by hand.
    replayed = requests.post(discovery["token_endpoint"], data={
        "grant_type": "authorization_code", "code": "x" * 43, "redirect_uri": redirect,
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        "client_assertion": assertion(discovery, private)})
    second = requests.post(discovery["token_endpoint"], data=dict(
        urllib.parse.parse_qsl(replayed.request.body)))
    seen["keyed_first_use"] = replayed.json().get("error")
    seen["keyed_replay"] = second.json().get("error")
    return seen


def assertion(discovery, private):
    """An assertion as Authlib signs one for this app."""
    signed = private_key_jwt_sign(private, "keyed", discovery["token_endpoint"], alg="ES256")
    return signed.decode() if isinstance(signed, bytes) else signed


def main():
    if sys.argv[1] == "--make-key":
        make_key(sys.argv[2])
        return
    broker, web_secret, email, password, key_dir = sys.argv[1:6]
    seen = {}
    discovery = requests.get(broker + "/.well-known/openid-configuration").json()
    for key in ["authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri"]:
        if key not in discovery:
            fail("discovery lacks " + key)
    if "RS256" not in discovery["id_token_signing_alg_values_supported"]:
        fail("RS256 is not among the id token algorithms")
    keys = KeySet.import_key_set(requests.get(discovery["jwks_uri"]).json())

    web_redirect = "https://web.example/callback"
    web = OAuth2Session(
        "web", web_secret, scope="openid email profile", redirect_uri=web_redirect,
        code_challenge_method="S256", token_endpoint_auth_method="client_secret_basic")
    verifier = generate_token(48)
    nonce = generate_token(20)
    url, state = web.create_authorization_url(
        discovery["authorization_endpoint"], code_verifier=verifier, nonce=nonce)

    browser = requests.Session()
    page = browser.get(url, allow_redirects=False)
    if page.status_code != 200 or "Sign in to continue to" not in page.text:
        fail("no sign-in page: %s %s" % (page.status_code, page.text[:300]))
    consent = broker_pages.sign_in(browser, broker, page, email, password)
    if "Allow web?" not in consent.text:
        fail("no consent page: %s" % consent.text[:300])
    answered = broker_pages.allow(browser, broker, consent)
    back, _ = follow_to_app(browser, answered, web_redirect)
    if back is None:
        fail("the consent did not lead back to the app")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(back).query))
    seen["iss_in_response"] = query.get("iss")
    if query.get("state") != state:
        fail("state did not come back")

    token = web.fetch_token(
        discovery["token_endpoint"], authorization_response=back, code_verifier=verifier)
    decoded = jwt.decode(token["id_token"], keys)
    claims = decoded.claims
    jwt.JWTClaimsRegistry(
        iss={"essential": True, "value": broker}, aud={"essential": True, "value": "web"},
        nonce={"essential": True, "value": nonce}, sub={"essential": True}).validate(claims)
    seen["id_token_alg"] = decoded.header["alg"]
    seen["sub"] = claims["sub"]
    seen["email"] = claims.get("email")
    seen["has_refresh_token"] = "refresh_token" in token
    seen["userinfo_get"] = web.get(discovery["userinfo_endpoint"]).json()
    seen["userinfo_post"] = requests.post(
        discovery["userinfo_endpoint"], data={"access_token": token["access_token"]}).json()
    seen["userinfo_id_token"] = requests.get(
        discovery["userinfo_endpoint"], headers={"Authorization": "Bearer " + token["id_token"]}).status_code

    # A second app in the same browser: single sign-on, nothing typed. Public, PKCE, a loopback port.
    native_redirect = "http://127.0.0.1:47011/callback"
    native = OAuth2Session("native", scope="openid", redirect_uri=native_redirect, code_challenge_method="S256",
                           token_endpoint_auth_method="none")
    native_verifier = generate_token(48)
    url, native_state = native.create_authorization_url(
        discovery["authorization_endpoint"], code_verifier=native_verifier, prompt="none")
    response = browser.get(url, allow_redirects=False)
    back, stopped = follow_to_app(browser, response, native_redirect)
    if back is None:
        fail("single sign-on did not reach the second app: %s" % stopped.text[:300])
    native_token = native.fetch_token(
        discovery["token_endpoint"], authorization_response=back, code_verifier=native_verifier)
    seen["sso_sub"] = jwt.decode(native_token["id_token"], keys).claims["sub"]

    # response_mode=form_post (the same browser, single sign-on, consent remembered): the answer is a page that
    # posts code, state and iss to the app; Authlib redeems the code it carries.
    form_verifier = generate_token(48)
    url, form_state = web.create_authorization_url(
        discovery["authorization_endpoint"], code_verifier=form_verifier, nonce=generate_token(20),
        response_mode="form_post")
    response = browser.get(url, allow_redirects=False)
    posted = next((f for f in broker_pages.parse(response.text).forms if f["action"] == web_redirect), None)
    if response.status_code != 200 or posted is None:
        fail("no form-post page: %s %s" % (response.status_code, response.text[:300]))
    if posted["fields"].get("state") != form_state or posted["fields"].get("iss") != broker:
        fail("the form post's state or iss: %s" % posted["fields"])
    # Its code redeemed with client_secret_jwt (Authlib's ClientSecretJWT: an HS256 assertion under the secret).
    web_jwt = OAuth2Session(
        "web", web_secret, redirect_uri=web_redirect,
        token_endpoint_auth_method=ClientSecretJWT(discovery["token_endpoint"]))
    form_token = web_jwt.fetch_token(
        discovery["token_endpoint"], code=posted["fields"]["code"], code_verifier=form_verifier)
    seen["form_post_sub"] = jwt.decode(form_token["id_token"], keys).claims["sub"]
    seen["form_post_policy"] = response.headers.get("Content-Security-Policy")

    seen.update(keyed_app(broker, discovery, browser, keys, key_dir))

    # prompt=none in a browser without a broker session: login_required, at the redirect URI.
    url, _ = native.create_authorization_url(
        discovery["authorization_endpoint"], code_verifier=generate_token(48), prompt="none")
    response = requests.get(url, allow_redirects=False)
    refused = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(response.headers.get("Location", "")).query))
    seen["prompt_none_without_session"] = refused.get("error")

    print(json.dumps(seen))


if __name__ == "__main__":
    main()
