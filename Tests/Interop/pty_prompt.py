#!/usr/bin/env python3
"""Drives the broker CLI on a pseudo-terminal, as a person would type at it.

    pty_prompt.py BROKER_BINARY BROKER_URL BROKER_HOME

Checks: prompts appear on the terminal, passwords are not echoed and never printed, register asks twice
and refuses a mismatch, login offers a choice of provider, colour only without NO_COLOR. Prints one line
per failed check and exits 1 if any failed.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pty_session import drive  # noqa: E402

BINARY, URL, HOME = sys.argv[1:4]
PASSWORD = "pty typed secret 4711"
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def session(argv, script, extra_env=None, timeout=180):
    """Runs argv on a pty; script is a list of (text to wait for, line to type). Returns (status, transcript)."""
    env = dict(os.environ, BROKER_URL=URL, BROKER_HOME=HOME, TERM="xterm")
    env.pop("NO_COLOR", None)
    env.update(extra_env or {})
    status, transcript, unanswered, timed_out = drive([BINARY] + argv, script, env, timeout)
    check(not timed_out, f"{argv}: timed out; transcript: {transcript!r}")
    check(not unanswered, f"{argv}: prompts never shown: {[s[0] for s in unanswered]}; transcript: {transcript!r}")
    return status, transcript


# register: email asked with echo, password asked twice without echo.
status, text = session(
    ["register"],
    [("Email: ", "pty@example.com"), ("Password: ", PASSWORD), ("Password (again): ", PASSWORD)],
)
check(status == 0, f"register on a terminal exited {status}: {text!r}")
check("pty@example.com" in text, "the email is echoed as typed")
check(PASSWORD not in text, f"the password was echoed or printed: {text!r}")
check("Registered and signed in" in text, f"no confirmation: {text!r}")

# A mismatch creates nothing.
status, text = session(
    ["register", "--email", "other@example.com"],
    [("Password: ", PASSWORD), ("Password (again): ", PASSWORD + "x")],
)
check(status == 1, f"mismatched passwords exited {status}")
check("do not match" in text, f"no mismatch message: {text!r}")
check(PASSWORD not in text, "password printed on mismatch")

# login without --provider on a terminal: a choice, then email and password.
status, text = session(
    ["login", "--profile", "chosen"],
    [("Sign in with [1-1]: ", "1"), ("Email: ", "pty@example.com"), ("Password: ", PASSWORD)],
)
check(status == 0, f"login with a choice exited {status}: {text!r}")
check("Email and password (custom)" in text, f"the choice was not listed: {text!r}")
check(PASSWORD not in text, "password echoed at login")

# login --email asks the password once.
status, text = session(["login", "--provider", "custom", "--email", "pty@example.com"], [("Password: ", PASSWORD)])
check(status == 0, f"login --email exited {status}: {text!r}")
check(PASSWORD not in text, "password echoed at login --email")

# Wrong password: exit 1, nothing echoed.
status, text = session(["login", "--provider", "custom", "--email", "pty@example.com"], [("Password: ", "wrong one")])
check(status == 1, f"a wrong password exited {status}")
check("wrong email or password" in text, f"no clear message: {text!r}")

# Colour on a terminal, none with NO_COLOR.
status, text = session(["token", "--profile", "nobody"], [])
check(status == 4, f"token for an empty profile exited {status}")
check("\x1b[" in text, f"no colour on a terminal: {text!r}")
status, text = session(["token", "--profile", "nobody"], [], {"NO_COLOR": "1"})
check(status == 4 and "\x1b[" not in text, f"colour despite NO_COLOR: {text!r}")

for failure in failures:
    print(failure)
sys.exit(1 if failures else 0)
