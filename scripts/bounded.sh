#!/usr/bin/env bash
# scripts/bounded.sh MINUTES COMMAND [ARGUMENT…]
#
# Runs COMMAND in a process group of its own and gives it MINUTES. Past that, it prints what the group is
# doing — the process tree and, where gdb is installed, every thread's stack of each test process — then ends
# the whole group (SIGTERM, SIGKILL ten seconds later) and exits 124. A stalled test run then fails with the
# reason on record instead of running into CI's own time limit with nothing said.
set -uo pipefail

if [ $# -lt 2 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
    echo "usage: scripts/bounded.sh MINUTES COMMAND [ARGUMENT…]" >&2
    exit 64
fi
minutes=$1
shift

marker=$(mktemp)
setsid "$@" &
group=$!
# Interrupted here (Ctrl-C, CI cancelling), the group goes too: it is in a session of its own.
trap 'kill -TERM -- "-$group" 2> /dev/null; rm -f "$marker"; exit 130' INT TERM

report() {
    echo "== $* was still running after $minutes minutes; what it was doing:" >&2
    ps -o pid,ppid,stat,etime,args --forest -g "$group" >&2 || true
    if command -v gdb > /dev/null; then
        for test_process in $(pgrep -g "$group" -f 'PackageTests\.xctest|--testing-library' || true); do
            echo "== threads of $test_process" >&2
            timeout 120 gdb -p "$test_process" -batch -ex 'thread apply all bt 12' 2>&1 | grep -E '^(Thread|#)' >&2 || true
        done
    fi
    kill -TERM -- "-$group" 2> /dev/null || true
}

(
    # The watchdog's own sleep writes nowhere, so that it never holds the caller's output open.
    sleep $((minutes * 60)) > /dev/null 2>&1 &
    sleeper=$!
    trap 'kill "$sleeper" 2> /dev/null; exit 0' TERM
    wait "$sleeper"
    if kill -0 "$group" 2> /dev/null; then
        echo stalled > "$marker"
        report "$@"
        sleep 10 > /dev/null 2>&1
        kill -KILL -- "-$group" 2> /dev/null || true
    fi
) &
watchdog=$!

wait "$group"
status=$?
kill -TERM "$watchdog" 2> /dev/null
wait "$watchdog" 2> /dev/null
# Whatever the command left running in its group (a server a crashed test never stopped) goes too: it would
# hold the caller's output open, and a caller reading it (tee) would wait for ever.
if kill -TERM -- "-$group" 2> /dev/null; then
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 -- "-$group" 2> /dev/null || break
        sleep 1
    done
    kill -KILL -- "-$group" 2> /dev/null || true
fi
if [ -s "$marker" ]; then
    echo "== $* did not finish within $minutes minutes" >&2
    status=124
fi
rm -f "$marker"
exit "$status"
