#!/usr/bin/env python3
"""Plays the browser (and the CLI's half) of the loopback sign-in against a real broker and `broker emulate`.

Usage: browser_flow.py BROKER_URL PROVIDER [ACCOUNT] [DECISION]
Steps: PKCE + state like the CLI; GET /auth/P/start (no redirects followed, every hop checked); the
emulator's consent page; its form posted with ACCOUNT (default alice) and DECISION (allow | deny); the
broker's callback; the loopback redirect's code, state and iss checked; the code redeemed at /auth/token.
Prints one JSON object: {"loopback": {...query...}, "session": {...}} (session absent on error).
"""
import base64
import hashlib
import html.parser
import json
import secrets
import sys
import urllib.error
import urllib.parse
import urllib.request


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):
        return None


opener = urllib.request.build_opener(NoRedirect)


def get(url, data=None):
    request = urllib.request.Request(url, data=data)
    try:
        with opener.open(request, timeout=20) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


class Form(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.fields = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input" and attrs.get("type") == "hidden":
            self.fields[attrs["name"]] = attrs["value"]


def main():
    broker, provider = sys.argv[1], sys.argv[2]
    account = sys.argv[3] if len(sys.argv) > 3 else "alice"
    decision = sys.argv[4] if len(sys.argv) > 4 else "allow"
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    state = secrets.token_urlsafe(16)
    redirect_uri = "http://127.0.0.1:9/callback"
    start = f"{broker}/auth/{provider}/start?" + urllib.parse.urlencode({
        "redirect_uri": redirect_uri, "state": state, "code_challenge": challenge, "code_challenge_method": "S256"})
    status, headers, _ = get(start)
    assert status == 302, f"start: {status}"
    authorize = headers["Location"]
    status, _, body = get(authorize)
    assert status == 200, f"authorize: {status} {body[:200]}"
    form = Form()
    form.feed(body.decode())
    form.fields.update({"account": account, "decision": decision})
    action = urllib.parse.urljoin(authorize, "authorize")
    status, headers, _ = get(action, urllib.parse.urlencode(form.fields).encode())
    assert status == 302, f"consent: {status}"
    callback = headers["Location"]
    assert callback.startswith(f"{broker}/auth/{provider}/callback?"), callback
    status, headers, body = get(callback)
    assert status == 302, f"callback: {status} {body[:300]}"
    loopback = headers["Location"]
    assert loopback.startswith(redirect_uri + "?"), loopback
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(loopback).query))
    assert query.get("state") == state, "state mismatch"
    assert query.get("iss") == broker, f"iss {query.get('iss')}"
    result = {"loopback": query, "callback": callback}
    if "code" in query:
        fields = {"grant_type": "authorization_code", "code": query["code"], "code_verifier": verifier,
                  "redirect_uri": redirect_uri}
        status, _, body = get(f"{broker}/auth/token", urllib.parse.urlencode(fields).encode())
        result["session_status"] = status
        result["session"] = json.loads(body)
        result["verifier"] = verifier
    print(json.dumps(result))


if __name__ == "__main__":
    main()
