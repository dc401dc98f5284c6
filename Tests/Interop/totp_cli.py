#!/usr/bin/env python3
"""A person with an authenticator app, at a terminal: `broker mfa totp add` on a pseudo-terminal (the key read
off the screen, the code computed by pyotp — an implementation nobody here wrote — and typed at the prompt),
then `broker login --provider custom` asking for the code after the password, then the same code typed again.
Prints JSON {"add": {status, output}, "login": {…}, "replay": {…}, "key": KEY, "recovery_codes": […]}.

Usage: totp_cli.py BROKER_BINARY BROKER_URL BROKER_HOME EMAIL  (the password on stdin)
"""
import json
import os
import pty
import re
import select
import sys
import time

import pyotp

# A bound for a hung CLI on a busy machine; a passing run never waits it out.
WAIT_SECONDS = 180


def converse(binary, argv, env, answers):
    """Runs `broker ARGV…` on a pseudo-terminal; `answers` is a list of (prompt regex, function of the output so
    far → the line to type). Returns (exit code, output)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(binary, [binary] + argv, env)
    output = b""
    pending = list(answers)
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
        if pending and re.search(pending[0][0], output.decode(errors="replace").split("\n")[-1]):
            line = pending.pop(0)[1](output.decode(errors="replace"))
            os.write(fd, line.encode() + b"\r")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def main():
    binary, broker, home, email = sys.argv[1:5]
    password = sys.stdin.read().strip()
    env = dict(os.environ, BROKER_HOME=home, BROKER_URL=broker, NO_COLOR="1", TERM="dumb")
    found = {}

    def code_from_screen(output):
        match = re.search(r"key: ([A-Z2-7 ]+?)\s+\(", output)
        found["key"] = match.group(1).replace(" ", "")
        uri = re.search(r"URI: (otpauth://\S+)", output).group(1)
        found["uri_key"] = pyotp.parse_uri(uri).secret
        return pyotp.TOTP(found["key"]).now()

    add = converse(binary, ["mfa", "totp", "add"], env, [(r"Code the app shows now:", code_from_screen)])
    codes = re.findall(r"^([a-z2-7]{5}-[a-z2-7]{5})\s*$", add[1], re.M)
    totp = pyotp.TOTP(found.get("key", "A" * 32))
    # The enrolment's code has been used; the next step's code is what an app a few seconds ahead shows.
    following = totp.at(time.time() + 30)
    answers = [(r"Password:", lambda _: password), (r"Code from your authenticator app:", lambda _: following)]
    login = converse(binary, ["login", "--provider", "custom", "--email", email], env, answers)
    replay = converse(binary, ["login", "--provider", "custom", "--email", email], env, answers)
    print(json.dumps({
        "add": {"status": add[0], "output": add[1]}, "login": {"status": login[0], "output": login[1]},
        "replay": {"status": replay[0], "output": replay[1]}, "key": found.get("key"),
        "uri_key": found.get("uri_key"), "recovery_codes": codes,
    }))


if __name__ == "__main__":
    main()
