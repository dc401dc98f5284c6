#!/usr/bin/env python3
"""An AI agent's MCP client and two MCP servers, all from the MCP Python SDK (`mcp`), with broker as their
authorization server (issue "Tokens for every door", proof with code nobody here wrote).

Each server (A and B, on their own ports) publishes RFC 9728 protected-resource metadata naming broker and checks
every bearer token by asking broker's introspection endpoint (as a CI client, the way an operator's resource
server does); the SDK's middleware then refuses a token whose audience is not the server's own URL. Its one tool
answers the broker user the token was issued for.

The SDK's OAuth client is pointed at server A and nothing else: on the 401 it reads A's metadata, then broker's
RFC 8414 metadata, registers itself (RFC 7591, broker's `open` registration), sends the person through broker's
pages (walked here with requests: the password form and the consent page) with `resource`, redeems the code, and
calls the tool. Then A's token is shown to B (refused), the person signs out of broker in the browser (which ends
the sessions apps started through it), and the client is cut off: its next call asks for a new sign-in.

Usage: mcp_agent.py BROKER_URL EMAIL PASSWORD PORT_A PORT_B INTROSPECT_ID INTROSPECT_SECRET
Prints one JSON object of what it saw."""
import asyncio
import base64
import json
import socket
import sys
import threading
import urllib.parse

import httpx2
import requests
import uvicorn
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientMetadata

import broker_pages

BROKER, EMAIL, PASSWORD, PORT_A, PORT_B, RS_ID, RS_SECRET = sys.argv[1:8]
REDIRECT = "http://127.0.0.1:8976/callback"


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


class Introspecting(TokenVerifier):
    """A token is good when broker says it is active (RFC 7662); its `aud` is the resource it was issued for."""

    async def verify_token(self, token):
        answer = await asyncio.to_thread(
            requests.post, BROKER + "/auth/introspect", data={"token": token}, auth=(RS_ID, RS_SECRET), timeout=10)
        body = answer.json()
        if answer.status_code != 200 or not body.get("active"):
            return None
        audience = body.get("aud")
        return AccessToken(
            token=token, client_id=body.get("client_id", ""), scopes=(body.get("scope") or "").split(),
            expires_at=body.get("exp"), resource=audience if isinstance(audience, str) else None,
            subject=body.get("sub"))


def serve(port, name):
    url = f"http://127.0.0.1:{port}/mcp"
    server = MCPServer(
        name, token_verifier=Introspecting(),
        auth=AuthSettings(issuer_url=BROKER, resource_server_url=url, validate_token_resource=True))

    @server.tool()
    def whoami() -> str:
        """The broker user this call was made for."""
        return json.dumps({"server": name, "sub": get_access_token().subject})

    app = server.streamable_http_app(host="127.0.0.1")
    # Listening before the server thread starts: a request sent at once waits in the backlog until uvicorn takes it,
    # so nothing here waits for the server to be ready.
    listener = socket.create_server(("127.0.0.1", int(port)))
    runner = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    threading.Thread(target=runner.run, kwargs={"sockets": [listener]}, daemon=True).start()
    return url


class Memory(TokenStorage):
    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


def destination(answer):
    return answer.headers.get("Location") or broker_pages.parse(answer.text).refresh


class Person:
    """The person at the browser: signs in through broker's pages, once; a second request to sign in is refused."""

    def __init__(self):
        self.browser = requests.Session()
        self.sign_ins = 0
        self.allowed = 1
        self.callback = None
        self.authorization_url = None
        self.consent = None

    async def redirect(self, url):
        self.sign_ins += 1
        if self.sign_ins > self.allowed:
            raise RuntimeError("the client asked for a new sign-in")
        self.authorization_url = url
        page = self.browser.get(url, allow_redirects=False)
        if page.status_code != 200:
            fail(f"the authorization request was refused: {page.status_code} {page.text[:300]}")
        answer = broker_pages.sign_in(self.browser, BROKER, page, EMAIL, PASSWORD)
        if "/auth/authorize/consent" in answer.text:
            self.consent = answer.text
            answer = broker_pages.allow(self.browser, BROKER, answer)
        target = destination(answer)
        if not target or not target.startswith(REDIRECT):
            fail(f"no way back to the client: {answer.status_code} {answer.text[:300]}")
        self.callback = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(target).query))

    async def answer(self):
        return AuthorizationCodeResult(
            code=self.callback["code"], state=self.callback.get("state"), iss=self.callback.get("iss"))

    def sign_out(self):
        page = self.browser.get(BROKER + "/auth/end-session", allow_redirects=False)
        fields = broker_pages.form(page.text, "/auth/end-session/confirm")
        return self.browser.post(BROKER + "/auth/end-session/confirm", data=fields, allow_redirects=False)


async def call_whoami(url, provider):
    async with httpx2.AsyncClient(auth=provider, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                result = await session.call_tool("whoami", {})
                return json.loads(result.content[0].text)


def claims(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


async def main():
    a = serve(PORT_A, "A")
    b = serve(PORT_B, "B")
    seen = {}
    person = Person()
    storage = Memory()
    provider = OAuthClientProvider(
        server_url=a,
        client_metadata=OAuthClientMetadata(
            redirect_uris=[REDIRECT], client_name="MCP agent", token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"], response_types=["code"]),
        storage=storage, redirect_handler=person.redirect, callback_handler=person.answer)
    seen["whoami"] = await call_whoami(a, provider)
    seen["client_id"] = storage.client.client_id
    seen["client_secret"] = storage.client.client_secret
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(person.authorization_url).query))
    seen["authorization_resource"] = query.get("resource")
    seen["consent_says_registered"] = person.consent is not None and "registered itself" in person.consent
    access = storage.tokens.access_token
    seen["aud"] = claims(access)["aud"]
    seen["has_refresh_token"] = storage.tokens.refresh_token is not None
    # A's token at B: refused by B's own checks (its audience is A's).
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}}
    at_b = requests.post(b, json=initialize, headers={
        "Authorization": "Bearer " + access, "Accept": "application/json, text/event-stream"}, timeout=10)
    seen["a_token_at_b"] = at_b.status_code
    seen["b_challenge"] = at_b.headers.get("WWW-Authenticate", "")
    at_a = requests.post(a, json=initialize, headers={
        "Authorization": "Bearer " + access, "Accept": "application/json, text/event-stream"}, timeout=10)
    seen["a_token_at_a"] = at_a.status_code
    # The person signs out of broker: the app's session ends with it; the client is cut off.
    seen["sign_out"] = person.sign_out().status_code
    try:
        seen["after_sign_out"] = await call_whoami(a, provider)
    except BaseException as error:  # the SDK wraps the refusal in an exception group
        seen["after_sign_out"] = "refused"
        seen["after_sign_out_detail"] = repr(error)[:500]
    seen["sign_ins_asked"] = person.sign_ins
    refresh = requests.post(BROKER + "/auth/token", data={
        "grant_type": "refresh_token", "refresh_token": storage.tokens.refresh_token or "",
        "client_id": seen["client_id"]}, timeout=10)
    seen["refresh_after_sign_out"] = refresh.json().get("error")
    print(json.dumps(seen))


asyncio.run(main())
