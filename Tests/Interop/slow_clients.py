#!/usr/bin/env python3
"""Slow-client attack on a broker, as the review ran it: many half-sent requests held open, one request
trickled a byte at a time, and normal traffic beside them.

    slow_clients.py URL --hold N [--normal M] [--trickle-interval SECONDS]

Opens N connections that each send part of a request and then nothing, plus one connection that sends its
request one byte every --trickle-interval seconds. While they are open it sends M ordinary GET /healthz
requests, one connection each, and records what each got: an HTTP status, or the socket error. Then it
waits until the broker has closed every held connection (or --wait-closed seconds pass) and prints JSON:

    {"normal": [200, 503, ...], "normal_errors": [...], "held": N, "held_closed": K,
     "trickle_sent": bytes sent before the broker closed it, "trickle_total": the request's length,
     "after": status of one GET /healthz once the held connections are gone}

Bounded in count and time, and only towards the loopback address it is given.
"""
import argparse
import json
import select
import socket
import sys
import time
import urllib.parse

HALF_SENT = [
    # a request head that never ends
    b"GET /healthz HTTP/1.1\r\nHost: broker\r\nX-Slow: ",
    # a whole head, then a body that never arrives in full
    b"POST /auth/login HTTP/1.1\r\nHost: broker\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{",
    # nothing at all
    b"",
]
TRICKLED = b"GET /healthz HTTP/1.1\r\nHost: broker\r\nX-Padding: " + b"a" * 200 + b"\r\n\r\n"


def connect(host, port, timeout):
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def status_of(host, port, timeout):
    sock = connect(host, port, timeout)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        line = data.split(b"\r\n", 1)[0].split()
        if len(line) < 2:
            raise ConnectionError("no status line: %r" % data[:80])
        return int(line[1])
    finally:
        sock.close()


def closed_by_peer(sock):
    """True once the broker has closed the connection (EOF or reset), without blocking."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(4096) == b""
    except (ConnectionResetError, BrokenPipeError, OSError):
        return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--hold", type=int, required=True)
    parser.add_argument("--normal", type=int, default=20)
    parser.add_argument("--trickle-interval", type=float, default=0.5)
    parser.add_argument("--wait-closed", type=float, default=120)
    args = parser.parse_args()
    parsed = urllib.parse.urlsplit(args.url)
    host, port = parsed.hostname, parsed.port
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("slow_clients.py: loopback addresses only")

    held, connect_errors = [], []
    for index in range(args.hold):
        try:
            sock = connect(host, port, 10)
            part = HALF_SENT[index % len(HALF_SENT)]
            if part:
                sock.sendall(part)
            held.append(sock)
        except OSError as error:
            connect_errors.append(type(error).__name__)

    trickle = connect(host, port, 10)
    trickle_sent = 0
    trickle_closed = False

    def trickle_step():
        nonlocal trickle_sent, trickle_closed
        if trickle_closed or trickle_sent >= len(TRICKLED):
            return
        if closed_by_peer(trickle):
            trickle_closed = True
            return
        try:
            trickle.send(TRICKLED[trickle_sent:trickle_sent + 1])
            trickle_sent += 1
        except OSError:
            trickle_closed = True

    normal, normal_errors = [], []
    for _ in range(args.normal):
        trickle_step()
        try:
            normal.append(status_of(host, port, 60))
        except OSError as error:
            normal_errors.append("%s: %s" % (type(error).__name__, error))
        time.sleep(args.trickle_interval)

    deadline = time.monotonic() + args.wait_closed
    open_socks = list(held)
    while time.monotonic() < deadline:
        trickle_step()
        open_socks = [sock for sock in open_socks if not closed_by_peer(sock)]
        if not open_socks and (trickle_closed or trickle_sent >= len(TRICKLED)):
            break
        time.sleep(args.trickle_interval)
    held_closed = len(held) - len(open_socks)
    for sock in held + [trickle]:
        sock.close()

    try:
        after = status_of(host, port, 60)
    except OSError as error:
        after = "%s: %s" % (type(error).__name__, error)
    json.dump(
        {
            "normal": normal,
            "normal_errors": normal_errors,
            "connect_errors": connect_errors,
            "held": len(held),
            "held_closed": held_closed,
            "trickle_sent": trickle_sent,
            "trickle_total": len(TRICKLED),
            "trickle_closed": trickle_closed,
            "after": after,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
