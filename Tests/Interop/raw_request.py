#!/usr/bin/env python3
"""Sends one raw HTTP/1.1 request (its bytes on stdin, as given) to a loopback URL and prints the response's
status code, or "closed" when the server closed the connection without answering.

    raw_request.py http://127.0.0.1:PORT < request-bytes
"""
import socket
import sys
import urllib.parse

url = urllib.parse.urlsplit(sys.argv[1])
if url.hostname not in ("127.0.0.1", "localhost", "::1"):
    sys.exit("raw_request.py: loopback addresses only")
data = sys.stdin.buffer.read()
with socket.create_connection((url.hostname, url.port), timeout=120) as sock:
    sock.sendall(data)
    response = b""
    try:
        while b"\r\n" not in response:
            chunk = sock.recv(4096)
            if not chunk:
                break
            response += chunk
    except ConnectionResetError:
        pass
line = response.split(b"\r\n", 1)[0].split()
print(line[1].decode() if len(line) >= 2 else "closed")
