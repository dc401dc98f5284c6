#!/usr/bin/env python3
"""A small real HTTP server on 127.0.0.1 for BrokerHTTP's tests.

Prints "port N" on stdout once listening, serves until stdin closes (so it dies with the test process).

  /status/N          answers status N with body "status N"
  /echo              answers JSON {method, path, headers, body}
  /bytes/N           N bytes of 'x' with Content-Length
  /chunked/N         N bytes of 'x' in chunks, no Content-Length
  /slow/MS           waits MS milliseconds, then 200
  /hold/NAME         waits until /release/NAME (at most 120 s), then 200
  /release/NAME      releases every request held under NAME
  /held/NAME/N       answers once N requests are held under NAME (at most 120 s; 200, or 504)
  /redirect          302 to /status/200
  /redirect-loop     302 to itself
  /headers           several response headers, one repeated
"""
import os

# This server lives as long as the test process, and Foundation's `Process` hands it every descriptor the test
# process had open when it was started — among them the sockets by which Foundation notices the exit of other
# children started at the same moment. Held here for ever, such a socket made `waitUntilExit` wait for ever on a
# child that had long exited (a zombie) and stalled the suite. Close everything but stdin, stdout and stderr.
os.closerange(3, os.sysconf("SC_OPEN_MAX"))

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


GATES = {}
HELD = {}
LOCK = threading.Lock()
CHANGED = threading.Condition(LOCK)


def gate(name):
    with LOCK:
        return GATES.setdefault(name, threading.Event())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_body(self, status, body, content_type="text/plain", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = self.path.split("?")[0].strip("/").split("/")
        name, arg = parts[0], (parts[1] if len(parts) > 1 else "")
        if name == "status":
            self.send_body(int(arg), f"status {arg}".encode())
        elif name == "echo":
            doc = {"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                   "body": body.decode("utf-8", "replace")}
            self.send_body(200, json.dumps(doc).encode(), "application/json")
        elif name == "bytes":
            self.send_body(200, b"x" * int(arg))
        elif name == "chunked":
            total = int(arg)
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent = 0
            while sent < total:
                n = min(65536, total - sent)
                self.wfile.write(f"{n:x}\r\n".encode() + b"x" * n + b"\r\n")
                sent += n
            self.wfile.write(b"0\r\n\r\n")
        elif name == "slow":
            time.sleep(int(arg) / 1000)
            self.send_body(200, b"slow")
        elif name == "hold":
            with LOCK:
                HELD[arg] = HELD.get(arg, 0) + 1
                CHANGED.notify_all()
            released = gate(arg).wait(120)
            with LOCK:
                HELD[arg] -= 1
                CHANGED.notify_all()
            self.send_body(200 if released else 504, b"released" if released else b"never released")
        elif name == "release":
            gate(arg).set()
            self.send_body(200, b"ok")
        elif name == "held":
            wanted = int(parts[2]) if len(parts) > 2 else 1
            with LOCK:
                reached = CHANGED.wait_for(lambda: HELD.get(arg, 0) >= wanted, timeout=120)
            self.send_body(200 if reached else 504, str(HELD.get(arg, 0)).encode())
        elif name == "redirect":
            self.send_body(302, b"", extra=[("Location", "/status/200")])
        elif name == "redirect-loop":
            self.send_body(302, b"", extra=[("Location", "/redirect-loop")])
        elif name == "headers":
            self.send_body(200, b"ok", extra=[("X-One", "1"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"),
                                              ("X-Spaced", "  padded value  ")])
        else:
            self.send_body(404, b"not found")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = handle_any


class Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: with Swift Testing's parallel tests and the 64-request
    # test, overflowing connections hung until curl's 30 s timeout (seen in CI).
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        # Clients that give up (the timeout and abort tests) reset their connections: expected, not news.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def main():
    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"port {server.server_address[1]}", flush=True)
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
