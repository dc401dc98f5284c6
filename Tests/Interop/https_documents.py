#!/usr/bin/env python3
"""An https host behind a private CA (trustme, code we did not write) serving Client ID Metadata Documents, for the
broker's `server.ca_file` and its document rules.

Usage: https_documents.py CA_PATH
Writes the CA's certificate (PEM) to CA_PATH, then prints "documents at https://localhost:PORT" once listening, and
serves until stdin closes:
  /client.json       a good document: client_id is its own URL, a loopback redirect URI, public
  /redirecting.json  302 to /client.json
  /large.json        a valid JSON object of 100 KB
  /other.json        a document naming another client_id
"""
import json
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import trustme

CA = trustme.CA()
CA.cert_pem.write_to_path(sys.argv[1])
BASE = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, headers=()):
        payload = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        document = {
            "client_id": BASE[0] + self.path, "client_name": "Documented agent",
            "redirect_uris": ["http://127.0.0.1:7100/callback"], "token_endpoint_auth_method": "none",
        }
        if self.path == "/client.json":
            return self.send(200, document, [("Cache-Control", "max-age=120")])
        if self.path == "/redirecting.json":
            return self.send(302, b"", [("Location", "/client.json")])
        if self.path == "/large.json":
            return self.send(200, dict(document, padding="x" * 100_000))
        if self.path == "/other.json":
            return self.send(200, dict(document, client_id=BASE[0] + "/client.json"))
        self.send(404, {"error": "not_found"})


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    CA.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    BASE.append(f"https://localhost:{server.server_address[1]}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"documents at {BASE[0]}", flush=True)
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
