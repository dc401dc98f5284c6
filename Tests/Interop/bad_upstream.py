#!/usr/bin/env python3
"""An OpenID Connect upstream that misbehaves, one way per issuer path, for a broker's providers of type oidc.

Usage: bad_upstream.py [--https CA_PATH]   (prints "listening http(s)://127.0.0.1:PORT"; serves until stdin closes)
  --https: over TLS with a certificate from a private CA (trustme, code we did not write), whose certificate
  (PEM) is written to CA_PATH — for the broker's server.ca_file.
Issuer http://127.0.0.1:PORT/MODE. Discovery, a consent form (as browser_flow.py plays it) and its redirect
back with a code are well-formed unless MODE breaks them:
  discovery-html   discovery answers 200 with an HTML page
  discovery-huge   discovery answers 200 with 2 MB of JSON
  discovery-slow   discovery never answers (until stdin closes)
  token-html       the token endpoint answers 200 with an HTML page
  token-huge       the token endpoint answers 200 with 2 MB of JSON
  token-slow       the token endpoint never answers
  token-500        the token endpoint answers 500 with an HTML page
"""
import html
import json
import os
import sys
import threading
import urllib.parse

os.closerange(3, os.sysconf("SC_OPEN_MAX"))

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from joserfc.jwk import RSAKey

KEY = RSAKey.generate_key(2048, parameters={"kid": "k1", "use": "sig", "alg": "RS256"})
FOREVER = threading.Event()
PORT = 0
SCHEME = "https" if "--https" in sys.argv else "http"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body, content_type="application/json", headers=()):
        data = body if isinstance(body, bytes) else body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def hold(self):
        FOREVER.wait()

    def do_GET(self):
        parts = urllib.parse.urlparse(self.path)
        mode, _, rest = parts.path.lstrip("/").partition("/")
        issuer = "%s://127.0.0.1:%d/%s" % (SCHEME, PORT, mode)
        if rest == ".well-known/openid-configuration":
            if mode == "discovery-html":
                return self.answer(200, "<html><body>Sign in to continue</body></html>", "text/html")
            if mode == "discovery-huge":
                return self.answer(200, json.dumps({"issuer": issuer, "padding": "x" * (2 * 1024 * 1024)}))
            if mode == "discovery-slow":
                return self.hold()
            return self.answer(200, json.dumps({
                "issuer": issuer, "authorization_endpoint": issuer + "/authorize", "token_endpoint": issuer + "/token",
                "jwks_uri": issuer + "/jwks", "response_types_supported": ["code"],
                "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["RS256"]}))
        if rest == "jwks":
            return self.answer(200, json.dumps({"keys": [KEY.as_dict(private=False)]}))
        if rest == "authorize":
            query = dict(urllib.parse.parse_qsl(parts.query))
            hidden = "".join('<input type="hidden" name="%s" value="%s">' % (html.escape(k), html.escape(v))
                             for k, v in query.items())
            return self.answer(200, '<form method="post" action="/%s/authorize">%s<button>Allow</button></form>'
                               % (mode, hidden), "text/html")
        self.answer(404, "{}")

    def do_POST(self):
        mode, _, rest = urllib.parse.urlparse(self.path).path.lstrip("/").partition("/")
        length = int(self.headers.get("Content-Length") or 0)
        form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
        if rest == "authorize":
            target = form["redirect_uri"] + "?" + urllib.parse.urlencode({"code": "c0de", "state": form.get("state", "")})
            return self.answer(302, b"", "text/plain", [("Location", target)])
        if rest == "token":
            if mode == "token-html":
                return self.answer(200, "<html><body>Welcome back!</body></html>", "text/html")
            if mode == "token-huge":
                return self.answer(200, json.dumps({"access_token": "a", "padding": "x" * (2 * 1024 * 1024)}))
            if mode == "token-slow":
                return self.hold()
            return self.answer(500, "<html><body>Internal Server Error</body></html>", "text/html")
        self.answer(404, "{}")


def main():
    global PORT
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    PORT = server.server_address[1]
    if SCHEME == "https":
        import ssl
        import trustme
        ca = trustme.CA()
        ca.cert_pem.write_to_path(sys.argv[sys.argv.index("--https") + 1])
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("listening %s://127.0.0.1:%d" % (SCHEME, PORT), flush=True)
    sys.stdin.read()
    FOREVER.set()


if __name__ == "__main__":
    main()
