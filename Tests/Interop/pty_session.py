#!/usr/bin/env python3
"""Runs one command on a pseudo-terminal and answers its prompts, as a person would type them.

    pty_session.py SCRIPT_JSON -- COMMAND [ARG...]

SCRIPT_JSON is a list of [text to wait for, line to type]. The environment is passed on as it is. Prints
one JSON object: {"status": exit status, "transcript": everything the terminal showed, "unanswered": [prompts
never shown]}. Gives up (kills the command) after 120 seconds.
"""
import json
import os
import pty
import select
import sys
import time

separator = sys.argv.index("--")
steps = [tuple(step) for step in json.loads(sys.argv[1])]
argv = sys.argv[separator + 1:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
transcript = b""
deadline = time.time() + 120
while True:
    if steps and steps[0][0].encode() in transcript:
        _, line = steps.pop(0)
        transcript += b"<<typed>>"
        os.write(fd, (line + "\n").encode())
    ready, _, _ = select.select([fd], [], [], 0.2)
    if ready:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        transcript += chunk
    if time.time() > deadline:
        os.kill(pid, 9)
        break
_, status = os.waitpid(pid, 0)
print(json.dumps({
    "status": os.waitstatus_to_exitcode(status),
    "transcript": transcript.decode(errors="replace"),
    "unanswered": [step[0] for step in steps],
}))
