#!/usr/bin/env python3
"""Holds idle TCP connections open to a local server of its own, as load beside the test suite.

    idle_connections.py [--connections N]

Starts a threaded TCP server on 127.0.0.1 that accepts and never answers, opens N client connections to
it, and holds them until it is killed (or an hour passes). Loopback only; bounded in count and time.
"""
import argparse
import socket
import socketserver
import threading
import time


class Silent(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            while self.request.recv(1024):
                pass
        except OSError:
            pass


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=300)
    args = parser.parse_args()
    server = Server(("127.0.0.1", 0), Silent)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(min(args.connections, 5000))]
    print(f"holding {len(held)} idle connections to 127.0.0.1:{port}", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    main()
