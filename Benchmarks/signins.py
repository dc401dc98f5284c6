#!/usr/bin/env python3
"""Whole sign-ins of an app through broker's pages, as a browser makes them, for Benchmarks/signins.sh.

  signins.py BROKER ISSUER MODE SECONDS WORKERS       MODE: password | passkey

Each sign-in is a new browser (no cookies): the app's authorization request (PKCE, nonce) shows the sign-in
page; the password form (or a passkey: fresh options, an assertion, the page's passkey form) signs in; consent,
given once before the run, is remembered; the code comes back to the app's redirect URI and the app spends it at
the token endpoint (HTTP Basic) for an access token and an id token, both checked present. WORKERS browsers sign
in at once for SECONDS; prints {"signins": N, "requests": M} (M: HTTP requests sent to the broker).
The passkey mode first registers its passkey (a software one, Benchmarks/passkey_authenticator.py) through the
page `broker passkey add` opens, with the session in $ACCESS.
Environment: APP_SECRET (the app "bench"'s secret), REDIRECT, EMAIL, PASSWORD, and ACCESS for the passkey mode.
Exits non-zero, saying why, at the first sign-in that does not end in tokens.
"""
import base64
import concurrent.futures
import hashlib
import html
import json
import os
import secrets
import sys
import threading
import time
import urllib.parse

import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "Interop"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import broker_pages  # noqa: E402
import passkey_authenticator  # noqa: E402

broker, issuer, mode = sys.argv[1], sys.argv[2], sys.argv[3]
redirect, email, password = os.environ["REDIRECT"], os.environ["EMAIL"], os.environ["PASSWORD"]
basic = (("bench", os.environ["APP_SECRET"]))


class Failed(Exception):
    pass


def authorize(browser):
    """The app's authorization request; returns the sign-in page and the PKCE verifier."""
    verifier = secrets.token_urlsafe(32)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = urllib.parse.urlencode({
        "response_type": "code", "client_id": "bench", "redirect_uri": redirect, "scope": "openid email",
        "state": secrets.token_urlsafe(8), "nonce": secrets.token_urlsafe(8), "code_challenge": challenge,
        "code_challenge_method": "S256"})
    page = browser.get(broker + "/auth/authorize?" + query, allow_redirects=False)
    if page.status_code != 200:
        raise Failed(f"the authorization request answered {page.status_code}: {page.text[:200]}")
    return page, verifier


def code_of(browser, answer, allow):
    """The code on its way back to the app: a redirect, or the onward page's refresh, after consent if asked."""
    requests_sent = 0
    if answer.status_code == 200 and "/auth/authorize/consent" in answer.text:
        if not allow:
            raise Failed("consent was asked again: it should be remembered")
        answer = broker_pages.allow(browser, broker, answer)
        requests_sent += 1
    if answer.status_code in (302, 303):
        target = answer.headers["Location"]
    elif answer.status_code == 200 and broker_pages.parse(answer.text).refresh:
        target = broker_pages.parse(answer.text).refresh
    else:
        raise Failed(f"the sign-in answered {answer.status_code}: {answer.text[:300]}")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(target.replace("&amp;", "&")).query))
    if not target.startswith(redirect) or "code" not in query:
        raise Failed(f"the sign-in went to {target[:200]}, not the app with a code")
    return query["code"], requests_sent


def spend(code, verifier):
    answer = requests.post(broker + "/auth/token", auth=basic, data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": redirect, "code_verifier": verifier})
    body = answer.json() if answer.headers.get("Content-Type", "").startswith("application/json") else {}
    if answer.status_code != 200 or "id_token" not in body or "access_token" not in body:
        raise Failed(f"the token endpoint answered {answer.status_code}: {answer.text[:200]}")


def password_sign_in(allow=False):
    browser = requests.Session()
    page, verifier = authorize(browser)
    code, extra = code_of(browser, broker_pages.sign_in(browser, broker, page, email, password), allow)
    spend(code, verifier)
    return 3 + extra


def passkey_sign_in(passkey, allow=False):
    browser = requests.Session()
    page, verifier = authorize(browser)
    started = browser.post(broker + "/auth/passkey/options", json={})
    if started.status_code != 200:
        raise Failed(f"the passkey options answered {started.status_code}: {started.text[:200]}")
    started = started.json()
    fields = dict(broker_pages.form(page.text, "/auth/authorize/passkey"), ceremony=started["ceremony"],
                  credential=passkey.assertion(started["publicKey"]))
    answer = browser.post(broker + "/auth/authorize/passkey", data=fields, allow_redirects=False)
    code, extra = code_of(browser, answer, allow)
    spend(code, verifier)
    return 4 + extra


def setup_passkey():
    """Registers a passkey through the page `broker passkey add` opens, then signs in with it once (consent)."""
    host = urllib.parse.urlparse(issuer).hostname
    passkey = passkey_authenticator.Passkey(host, issuer)
    ticket = requests.post(broker + "/auth/passkey/ticket", headers={"Authorization": "Bearer " + os.environ["ACCESS"]})
    if ticket.status_code != 200:
        raise Failed(f"the passkey ticket answered {ticket.status_code}: {ticket.text[:200]}")
    ticket = ticket.json()
    browser = requests.Session()
    page = browser.get(broker + ticket["url"][len(issuer):], allow_redirects=False)
    if page.status_code != 200:
        raise Failed(f"the passkey page answered {page.status_code}: {page.text[:200]}")
    marker = 'data-options="'
    start = page.text.index(marker) + len(marker)
    options = json.loads(html.unescape(page.text[start:page.text.index('"', start)]))
    fields = dict(broker_pages.form(page.text, "/auth/passkey/add"), credential=passkey.register(options),
                  name="benchmark")
    added = browser.post(broker + "/auth/passkey/add", data=fields, allow_redirects=False)
    if added.status_code != 200 or "<title>Passkey added</title>" not in added.text:
        raise Failed(f"the passkey was not added ({added.status_code}): {added.text[:300]}")
    passkey_sign_in(passkey, allow=True)
    return passkey


def run(seconds, workers, one):
    deadline = time.monotonic() + seconds
    counts = {"signins": 0, "requests": 0}
    lock = threading.Lock()

    def worker(_):
        while time.monotonic() < deadline:
            sent = one()
            with lock:
                counts["signins"] += 1
                counts["requests"] += sent

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for result in pool.map(worker, range(workers)):
            pass
    print(json.dumps(counts))


try:
    if mode == "password":
        password_sign_in(allow=True)  # consent, once
        run(float(sys.argv[4]), int(sys.argv[5]), password_sign_in)
    elif mode == "passkey":
        passkey = setup_passkey()
        run(float(sys.argv[4]), int(sys.argv[5]), lambda: passkey_sign_in(passkey))
    else:
        sys.exit(__doc__)
except Failed as failure:
    sys.exit(f"signins.py: {failure}")
