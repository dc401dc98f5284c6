#!/usr/bin/env python3
"""A person on an SSH session: `broker login --provider P --no-browser` on a pseudo-terminal; the sign-in
happens "on another machine" (urllib follows the redirects up to, not into, the loopback address), and the
final address is pasted into the CLI. Prints JSON {"status", "output"}.

Usage: pty_paste.py BROKER_BINARY BROKER_URL BROKER_HOME PROVIDER [garbage-first]
"""
import json
import os
import pty
import re
import select
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
import browser_flow  # noqa: E402

# How long the CLI waits for the pasted address, and this script for the CLI: one bound for both, long enough
# for a whole parallel test run on two cores (it catches a hang; a passing run never waits it out).
WAIT_SECONDS = 180


def main():
    binary, broker, home, provider = sys.argv[1:5]
    garbage_first = len(sys.argv) > 5
    env = dict(os.environ, BROKER_HOME=home, BROKER_URL=broker, NO_COLOR="1", TERM="dumb")
    for name in ("BROWSER", "DISPLAY", "WAYLAND_DISPLAY"):  # a machine with no way to open a browser
        env.pop(name, None)
    pid, fd = pty.fork()
    if pid == 0:
        argv = [binary, "login", "--provider", provider, "--no-browser", "--timeout", str(WAIT_SECONDS)]
        os.execve(binary, argv, env)
    output = b""
    url = None
    deadline = time.time() + WAIT_SECONDS
    while time.time() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        match = re.search(rb"(http://\S+/auth/\S+/start\?\S+)", output)
        if match and url is None and b"paste" in output:
            url = match.group(1).decode()
            status, headers, _ = browser_flow.get(url)
            authorize = headers["Location"]
            status, headers, _ = browser_flow.get(authorize + "&approve_as=paster")
            status, headers, _ = browser_flow.get(headers["Location"])
            final = headers["Location"]  # the loopback address, never fetched
            if garbage_first:
                os.write(fd, b"not an address\r")
                time.sleep(0.3)
            os.write(fd, final.encode() + b"\r")
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"status": os.waitstatus_to_exitcode(status), "output": output.decode(errors="replace")}))


if __name__ == "__main__":
    main()
