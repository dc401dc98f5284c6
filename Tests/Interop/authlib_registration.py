#!/usr/bin/env python3
"""An app that registers itself with an initial access token (RFC 7591, `server.client_registration: token`) and
then signs its user in with Authlib (code we did not write), asking for one API's token (RFC 8707 `resource`).

The registration answer is read by Authlib's own RFC 7591 metadata rules (`ClientMetadataClaims`); the app then runs
the code flow with PKCE as a confidential client (`client_secret_basic`) with `resource`, and refreshes into a
token for a second registered API without a new sign-in. The token is single-use: a second registration with it
is refused.

Usage: authlib_registration.py BROKER_URL INITIAL_TOKEN EMAIL PASSWORD API_ONE API_TWO
Prints one JSON object of what it saw."""
import base64
import json
import sys
import urllib.parse

import requests
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session
from authlib.oauth2.rfc7591 import ClientMetadataClaims

import broker_pages

BROKER, INITIAL, EMAIL, PASSWORD, API_ONE, API_TWO = sys.argv[1:7]
REDIRECT = "https://registered.example/callback"


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def claims(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def main():
    seen = {}
    metadata = requests.get(BROKER + "/.well-known/oauth-authorization-server").json()
    endpoint = metadata.get("registration_endpoint")
    if not endpoint:
        fail("no registration_endpoint in the metadata")
    asked = {
        "client_name": "Registered web app", "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_basic", "scope": "openid email offline_access",
    }
    seen["without_token"] = requests.post(endpoint, json=asked).status_code
    answer = requests.post(endpoint, json=asked, headers={"Authorization": "Bearer " + INITIAL})
    seen["registered"] = answer.status_code
    registered = answer.json()
    ClientMetadataClaims(registered, {}).validate()
    seen["metadata_valid"] = True
    seen["token_endpoint_auth_method"] = registered["token_endpoint_auth_method"]
    seen["again"] = requests.post(endpoint, json=asked, headers={"Authorization": "Bearer " + INITIAL}).status_code

    app = OAuth2Session(
        registered["client_id"], registered["client_secret"], scope="openid email offline_access",
        redirect_uri=REDIRECT, code_challenge_method="S256", token_endpoint_auth_method="client_secret_basic")
    verifier = generate_token(48)
    url, state = app.create_authorization_url(
        metadata["authorization_endpoint"], code_verifier=verifier, resource=API_ONE)
    browser = requests.Session()
    page = browser.get(url, allow_redirects=False)
    consent = broker_pages.sign_in(browser, BROKER, page, EMAIL, PASSWORD)
    seen["consent_says_registered"] = "registered itself" in consent.text
    seen["consent_shows_host"] = "<strong>registered.example</strong>" in consent.text
    answered = broker_pages.allow(browser, BROKER, consent)
    back = answered.headers.get("Location") or broker_pages.parse(answered.text).refresh
    if not back or not back.startswith(REDIRECT):
        fail("no way back to the app: %s" % answered.text[:300])
    if dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(back).query)).get("state") != state:
        fail("state did not come back")
    token = app.fetch_token(
        metadata["token_endpoint"], authorization_response=back, code_verifier=verifier, resource=API_ONE)
    seen["aud"] = claims(token["access_token"])["aud"]
    seen["client_id_claim"] = claims(token["access_token"])["client_id"] == registered["client_id"]
    refreshed = app.refresh_token(metadata["token_endpoint"], refresh_token=token["refresh_token"], resource=API_TWO)
    seen["refreshed_aud"] = claims(refreshed["access_token"])["aud"]
    unregistered = requests.post(metadata["token_endpoint"], data={
        "grant_type": "refresh_token", "refresh_token": refreshed["refresh_token"],
        "resource": "https://unregistered.example/api"}, auth=(registered["client_id"], registered["client_secret"]))
    seen["unregistered_resource"] = unregistered.json().get("error")
    print(json.dumps(seen))


main()
