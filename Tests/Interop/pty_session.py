#!/usr/bin/env python3
"""Runs one command on a pseudo-terminal and answers its prompts, as a person would type them.

    pty_session.py SCRIPT_JSON -- COMMAND [ARG...]

SCRIPT_JSON is a list of [text to wait for, line to type]. The environment is passed on as it is. Prints
one JSON object: {"status": exit status, "transcript": everything the terminal showed, "unanswered": [prompts
never shown]}. Gives up (kills the command) after 120 seconds. `drive` is the same, for other scripts.
"""
import json
import os
import pty
import select
import sys
import time


def drive(argv, steps, env=None, timeout=180):
    """Runs argv on a pty, typing each step's line once its text was shown. Returns (status, transcript,
    unanswered steps, timed out); "<<typed>>" marks in the transcript where input went."""
    pid, fd = pty.fork()
    if pid == 0:
        if env is None:
            os.execvp(argv[0], argv)
        os.execve(argv[0], argv, env)
    steps = [tuple(step) for step in steps]
    transcript = b""
    deadline = time.time() + timeout
    timed_out = False
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
            timed_out = True
            break
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), transcript.decode(errors="replace"), steps, timed_out


if __name__ == "__main__":
    separator = sys.argv.index("--")
    status, transcript, unanswered, _ = drive(sys.argv[separator + 1:], json.loads(sys.argv[1]))
    print(json.dumps({
        "status": status, "transcript": transcript, "unanswered": [step[0] for step in unanswered],
    }))
