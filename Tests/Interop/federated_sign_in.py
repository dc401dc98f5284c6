#!/usr/bin/env python3
"""A broker federating a broker: plays the CLI and the browser of a sign-in at DOWNSTREAM through its provider
PROVIDER, an upstream broker's app (`"type": "oidc"`), where the person signs in with EMAIL and a password read
from stdin on the upstream's own sign-in page (and allows, when it asks).

Usage: federated_sign_in.py DOWNSTREAM PROVIDER EMAIL < PASSWORD
Steps: PKCE + state like the CLI; GET DOWNSTREAM/auth/PROVIDER/start; the upstream's sign-in page; its
password form; its consent page if any; its onward page back to DOWNSTREAM's callback; the loopback redirect's
code redeemed at DOWNSTREAM/auth/token. Prints {"loopback": {...}, "session": {...}, "upstream_pages": [...]}.
"""
import base64
import hashlib
import json
import secrets
import sys
import urllib.parse

import requests

import broker_pages


def main():
    downstream, provider, email = sys.argv[1:4]
    password = sys.stdin.read().strip()
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    state = secrets.token_urlsafe(16)
    redirect_uri = "http://127.0.0.1:9/callback"
    browser = requests.Session()
    response = browser.get(f"{downstream}/auth/{provider}/start?" + urllib.parse.urlencode({
        "redirect_uri": redirect_uri, "state": state, "code_challenge": challenge,
        "code_challenge_method": "S256"}), allow_redirects=False)
    assert response.status_code == 302, f"start: {response.status_code} {response.text[:300]}"
    authorize = response.headers["Location"]
    upstream = authorize.split("/auth/authorize", 1)[0]
    page = browser.get(authorize, allow_redirects=False)
    assert page.status_code == 200, f"upstream authorize: {page.status_code} {page.text[:300]}"
    seen = {"upstream_pages": ["sign-in"]}
    answer = broker_pages.sign_in(browser, upstream, page, email, password)
    if "/auth/authorize/consent" in answer.text:
        seen["upstream_pages"].append("consent")
        answer = broker_pages.allow(browser, upstream, answer)
    # The upstream's way back: a redirect, or its onward page's refresh.
    for _ in range(5):
        location = answer.headers.get("Location") or broker_pages.parse(answer.text).refresh
        assert location, f"no way back from the upstream: {answer.status_code} {answer.text[:300]}"
        location = urllib.parse.urljoin(answer.url, location)
        if location.startswith(redirect_uri):
            break
        answer = browser.get(location, allow_redirects=False)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(location).query))
    seen["loopback"] = query
    if "code" in query:
        assert query.get("state") == state, "state mismatch"
        token = requests.post(f"{downstream}/auth/token", data={
            "grant_type": "authorization_code", "code": query["code"], "code_verifier": verifier,
            "redirect_uri": redirect_uri})
        seen["session_status"] = token.status_code
        seen["session"] = token.json()
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
