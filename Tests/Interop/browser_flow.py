#!/usr/bin/env python3
"""Plays the browser (and the CLI's half) of the loopback sign-in against a real broker and `broker emulate`.

Usage: browser_flow.py BROKER_URL PROVIDER [ACCOUNT] [DECISION] [MODE]
Steps: PKCE + state like the CLI; GET /auth/P/start (no redirects followed, every hop checked); the
emulator's consent page; its form posted with ACCOUNT (default alice) and DECISION (allow | deny); the
broker's callback; the loopback redirect's code, state and iss checked; the code redeemed at /auth/token.
Prints one JSON object: {"loopback": {...query...}, "session": {...}} (session absent on error).
MODE adds a misuse after the sign-in and reports the broker's answer under "misuse":
  replay-callback  the provider's callback URL opened a second time
  reuse-code       the one-time code redeemed a second time (also reports /auth/me for the first token)
  wrong-verifier   the code redeemed with another PKCE verifier (instead of the right one)
  wrong-redirect   the code redeemed with another redirect_uri (instead of the right one)
  tampered-state   the callback with one character of the broker's state changed
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


import http.cookiejar

# Cookies as a browser keeps them (the broker carries OAuth 1.0a state to its callback in one).
cookies = http.cookiejar.CookieJar()
opener = urllib.request.build_opener(NoRedirect, urllib.request.HTTPCookieProcessor(cookies))


def get(url, data=None):
    request = urllib.request.Request(url, data=data)
    try:
        with opener.open(request, timeout=120) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


class Form(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.fields = {}
        self.action = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.action = attrs.get("action") or ""
        if tag == "input" and attrs.get("type") == "hidden":
            self.fields[attrs["name"]] = attrs["value"]


def posted_back(status, headers, body):
    """A provider that answers with `response_mode=form_post` (Sign in with Apple): its page posts a form to the
    broker's callback, which relays it to a GET of its own (303). Plays that page (as a browser runs its
    onload) and answers (status, headers, body) as a redirecting provider would have: the callback to follow."""
    if status != 200 or b'id="form_post"' not in body:
        return status, headers, body
    form = Form()
    form.feed(body.decode())
    status, headers, body = get(form.action, urllib.parse.urlencode(form.fields).encode())
    assert status == 303, f"form_post callback: {status} {body[:300]}"
    return 302, headers, body


def open_mode(start):
    """As $BROWSER for `broker login`: the CLI's start URL is the last argument. Holds an idle connection to
    the CLI's listener first (as browsers do), asks it for another path, then follows the flow to the loopback
    and reads the CLI's page. Writes {"page_status", "page", "other_path_status", ...} to $BROWSER_RESULT —
    always, and whole (renamed into place): with "error" (the traceback) when a step failed. The CLI does not
    wait for its browser, so the test waits for this file; it must appear whatever happened."""
    import os
    import traceback
    result = {}
    try:
        browse(start, result)
    except BaseException:
        result["error"] = traceback.format_exc()
    finally:
        partial = os.environ["BROWSER_RESULT"] + ".partial"
        with open(partial, "w") as out:
            json.dump(result, out)
        os.replace(partial, os.environ["BROWSER_RESULT"])


def browse(start, result):
    """open_mode's steps; fills `result` as it goes."""
    import os
    import socket
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(start).query))
    loopback = urllib.parse.urlparse(query["redirect_uri"])
    idle = socket.create_connection((loopback.hostname, loopback.port), timeout=120)
    try:
        status, _, _ = get(f"http://{loopback.hostname}:{loopback.port}/favicon.ico")
        result["other_path_status"] = status
        decision = os.environ.get("BROWSER_DECISION", "allow")
        status, headers, _ = get(start)
        assert status == 302, f"start: {status}"
        authorize = headers["Location"]
        if os.environ.get("BROWSER_FAULT"):
            authorize += "&fault=" + os.environ["BROWSER_FAULT"]
        status, _, body = get(authorize)
        form = Form()
        form.feed(body.decode())
        form.fields.update({"account": os.environ.get("BROWSER_ACCOUNT", "alice"), "decision": decision})
        status, headers, body = posted_back(
            *get(urllib.parse.urljoin(authorize, form.action), urllib.parse.urlencode(form.fields).encode()))
        status, headers, _ = get(headers["Location"])
        assert status == 302, f"callback: {status}"
        target = headers["Location"]
        if os.environ.get("BROWSER_TAMPER_STATE"):
            target = target.replace("state=", "state=x")
        if os.environ.get("BROWSER_TAMPER_ISS"):
            target = target.replace("iss=http", "iss=https%3A%2F%2Fevil.example%2F")
        if os.environ.get("BROWSER_STRAY_FIRST"):
            # Someone else's request reaches the CLI's port first: a wrong state, then none at all.
            stray = target.replace("state=", "state=stray")
            result["stray_status"] = get(stray)[0]
            result["stateless_status"] = get(f"http://{loopback.hostname}:{loopback.port}/callback?code=x")[0]
        status, headers, body = get(target)
        result.update({"page_status": status, "page": body.decode(), "cache_control": headers.get("Cache-Control")})
    finally:
        idle.close()


def main():
    if sys.argv[1] == "--open":
        return open_mode(sys.argv[-1])
    broker, provider = sys.argv[1], sys.argv[2]
    account = sys.argv[3] if len(sys.argv) > 3 else "alice"
    decision = sys.argv[4] if len(sys.argv) > 4 else "allow"
    mode = sys.argv[5] if len(sys.argv) > 5 else ""
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
    action = urllib.parse.urljoin(authorize, form.action)
    status, headers, _ = posted_back(*get(action, urllib.parse.urlencode(form.fields).encode()))
    assert status == 302, f"consent: {status}"
    callback = headers["Location"]
    assert callback.startswith(f"{broker}/auth/{provider}/callback?"), callback
    result = {"callback": callback}
    if mode == "tampered-state":
        parts = urllib.parse.urlparse(callback)
        query = dict(urllib.parse.parse_qsl(parts.query))
        query["state"] = query["state"][:-2] + ("A" if query["state"][-2] != "A" else "B") + query["state"][-1]
        status, _, body = get(f"{broker}/auth/{provider}/callback?" + urllib.parse.urlencode(query))
        result["misuse"] = {"status": status, "body": json.loads(body or b"{}")}
        print(json.dumps(result))
        return
    status, headers, body = get(callback)
    assert status == 302, f"callback: {status} {body[:300]}"
    loopback = headers["Location"]
    assert loopback.startswith(redirect_uri + "?"), loopback
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(loopback).query))
    assert query.get("state") == state, "state mismatch"
    assert query.get("iss") == broker, f"iss {query.get('iss')}"
    result["loopback"] = query
    if mode == "replay-callback":
        status, _, body = get(callback)
        result["misuse"] = {"status": status, "body": json.loads(body or b"{}")}
    if "code" in query:
        fields = {"grant_type": "authorization_code", "code": query["code"], "code_verifier": verifier,
                  "redirect_uri": redirect_uri}
        if mode == "wrong-verifier":
            fields["code_verifier"] = secrets.token_urlsafe(48)
        if mode == "wrong-redirect":
            fields["redirect_uri"] = "http://127.0.0.1:10/callback"
        status, _, body = get(f"{broker}/auth/token", urllib.parse.urlencode(fields).encode())
        result["session_status"] = status
        result["session"] = json.loads(body)
        if mode == "reuse-code":
            status, _, body = get(f"{broker}/auth/token", urllib.parse.urlencode(fields).encode())
            result["misuse"] = {"status": status, "body": json.loads(body)}
            request = urllib.request.Request(f"{broker}/auth/me", headers={
                "Authorization": "Bearer " + result["session"]["access_token"]})
            try:
                with opener.open(request, timeout=120) as response:
                    result["me_after_reuse"] = response.status
            except urllib.error.HTTPError as error:
                result["me_after_reuse"] = error.code
    print(json.dumps(result))


if __name__ == "__main__":
    main()
