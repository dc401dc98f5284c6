#!/usr/bin/env bash
# Runs every test: formatting lint, the Swift test suites (unit, loopback HTTP, real binary, Python interop),
# then every fuzz harness for a short time.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every step's heading carries the time since the start ([12m05s]): where a run's minutes went is in its log.
started=$SECONDS
step() { printf '== [%dm%02ds] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*" >&2; }

scripts/setup.sh

step "swift format lint"
swift format lint --strict -r Sources Providers Tests Benchmarks Fuzz Plugins Package.swift
# The docs' links first (seconds, no build): a broken one fails here. Their runnable snippets run after the suites.
step "scripts/check-docs.py self-test; scripts/check-docs.py links; the instruction budget's self-test"
scripts/check-docs.py self-test
scripts/check-docs.py links
python3 Benchmarks/callgrind/budget.py self-test

# One build of everything, in the release configuration, in the scratch folder scripts/install.sh uses
# (.build-install): the products users install and the tests that run them are compiled once, from one set of
# objects. The tests import our modules without `@testable` (what they reach is `package`), so the library
# modules compile exactly as `swift build -c release --product broker` compiles them, and install.sh below finds
# them built. (A debug build for the tests beside a release build for the install was two compiles of swift-nio,
# Hummingbird, PostgresNIO, GRDB and two BoringSSLs: 42 of a fresh run's 57 minutes.) The fuzz harnesses build
# in their own folder (sanitizers) beside it. Dependencies are resolved once first, so that the two builds agree
# on one graph and never write Package.resolved at once on a fresh clone.
step "swift package resolve"
swift package resolve >/dev/null 2>&1 || swift package resolve

scratch=.build-install
# `swift test` takes the options that make its test build. The build step below is `swift test --filter '^$'`
# (a name no test has): it builds and runs nothing. Not `swift test list`: that ignores --disable-testable-imports,
# compiles every module with -enable-testing, and install.sh's build then compiled all of them again (9 minutes).
test_options=(-c release --scratch-path "$scratch" --disable-testable-imports)
install_prefix=$(mktemp -d)
install_log=$(mktemp)
fuzz_log=$(mktemp)
suite_log=$(mktemp)
fuzz_pid=
# A failed step ends the run: the background build's whole process tree goes with it.
kill_tree() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}
cleanup() {
    [ -n "$fuzz_pid" ] && kill_tree "$fuzz_pid"
    rm -rf "$install_prefix" "$install_log" "$fuzz_log" "$suite_log"
}
trap cleanup EXIT
step "scripts/fuzz.sh --build-only (in the background)"
scripts/fuzz.sh --build-only >"$fuzz_log" 2>&1 &
fuzz_pid=$!
# wait_for NAME PID LOG: a failed background step prints the end of its log and ends the run.
wait_for() {
    local status=0
    wait "$2" || status=$?
    if [ "$status" -ne 0 ]; then
        {
            echo "== FAILED (exit $status): $1"
            tail -n 80 "$3"
        } >&2
        exit "$status"
    fi
    step "done: $1"
}

# Quiet (errors only) here and in the test runs below: the build's progress lines alone come to 200 kB, and a
# CI page keeps only the first 512 kB of a run's output, so a failure near the end would not be seen.
# With SwiftPM's check that every target imports only the targets it declares (a target that reaches another
# through a third's dependencies builds today and breaks when the third changes).
step "swift build, release, in $scratch (the products and the tests; undeclared target imports are errors)"
build_log=$(mktemp)
# SWIFT_DETERMINISTIC_HASHING: as scripts/install.sh's builds have it (why: there), so that they find this one's
# objects; only the builds have it, not the tests' processes.
if ! SWIFT_DETERMINISTIC_HASHING=1 swift test "${test_options[@]}" --explicit-target-dependency-import-check error \
    --filter '^$' >"$build_log" 2>&1; then
    grep -av '^\[[0-9]*/[0-9]*\]' "$build_log" | tail -n 120 >&2
    rm -f "$build_log"
    exit 1
fi
rm -f "$build_log"
step "done: the release build"

# scripts/install.sh as users run it — the release configuration — twice (the second run must be harmless), into
# a throw-away prefix; InstallTests then runs what it installed and uninstalls it. Its build finds the products
# built above and relinks nothing; only argument-parser's generate-manual tool is new.
step "scripts/install.sh --prefix $install_prefix (twice)"
if ! (scripts/install.sh --prefix "$install_prefix" && scripts/install.sh --prefix "$install_prefix") \
    >"$install_log" 2>&1; then
    echo "== FAILED: scripts/install.sh" >&2
    tail -n 80 "$install_log" >&2
    exit 1
fi
grep -a '^installed broker' "$install_log" >&2 || true
# The products were built above: a module of ours compiled again here means the two builds' flags parted.
if grep -aE '^\[[0-9]+/[0-9]+\] Compiling (Broker|broker)' "$install_log" >&2; then
    echo "== FAILED: scripts/install.sh compiled again what the test build had built (above)" >&2
    exit 1
fi
wait_for "scripts/fuzz.sh --build-only" "$fuzz_pid" "$fuzz_log"
fuzz_pid=

# The load suite saturates every core with scrypt for tens of seconds (and its database-outage test stops the
# shared PostgreSQL cluster, its crash test kills brokers fifty times); on a 2-core CI machine it would starve
# the other suites' servers (a single registration then misses the CLI's 30 s timeout). It runs on its own,
# after everything else has run in parallel.
# Every suite runs beside one throw-away PostgreSQL cluster (scripts/with-postgres.sh): the store contract and
# the scale-out tests use it. The PostgreSQL tests alone: scripts/with-postgres.sh swift test --filter Postgres
#
# Each run is bounded (scripts/bounded.sh): a stalled run prints every thread's stack and fails, well inside
# CI's 90 minutes, instead of running into that limit with nothing said.
# A failed run ends with a summary of what failed (every failed expectation, crash or stall line), so that the
# reason is in the last lines of a long log, where a CI page shows it.
run_suite() {
    local minutes=$1
    shift
    local status=0
    scripts/bounded.sh "$minutes" scripts/with-postgres.sh "$@" 2>&1 | tee "$suite_log" || status=$?
    if [ "$status" -ne 0 ]; then
        {
            echo "== FAILED (exit $status): $*"
            grep -aE '✘|[Ff]atal error|error: |[Ee]xited with|signal [0-9]|did not finish|still running' "$suite_log" |
                grep -v '^✘ Test run with' | tail -n 60 || true
            grep -a '^✘ Test run with' "$suite_log" || true
        } >&2
        exit "$status"
    fi
}
# --quiet prints each failed expectation and the totals, not a line per test started and passed; set
# BROKER_TEST_VERBOSE=1 for those, and BROKER_TEST_LOG_LEVEL=info for the in-process servers' request lines.
verbosity=--quiet
[ -n "${BROKER_TEST_VERBOSE:-}" ] && verbosity=
# Three runs, each parallel within itself: the unit and in-process suites; then the end-to-end target (broker and
# CLI processes, Python, git, nginx, Chromium), whose processes then have the cores to themselves instead of
# sharing two with every other suite (a held request or a CLI timeout no longer depends on what else runs);
# then the load suite alone.
step "swift test (unit and in-process suites)"
run_suite 40 swift test "${test_options[@]}" $verbosity --skip-build --skip BrokerEndToEndTests
step "swift test (end to end: processes, all but the load suite and the installed tree)"
run_suite 40 swift test "${test_options[@]}" $verbosity --skip-build --filter BrokerEndToEndTests --skip LoadTests --skip InstallTests
step "swift test (the load suite, alone)"
run_suite 20 swift test "${test_options[@]}" $verbosity --skip-build --filter LoadTests
step "swift test (the installed tree: InstallTests)"
export BROKER_TEST_INSTALL_PREFIX=$install_prefix
run_suite 10 swift test "${test_options[@]}" $verbosity --skip-build --filter InstallTests

# The runnable snippets of the docs (the README's tour: emulators, a broker, a sign-in) on the release build,
# after the suites: the tour takes the documented ports 8787 and 8788, which nothing else holds by then.
step "scripts/check-docs.py run (the docs' runnable snippets)"
scripts/check-docs.py run --bin "$(swift build -c release --scratch-path "$scratch" --show-bin-path)"

# Each libFuzzer harness (Fuzz/) from its seed corpus for a short time: a crash or broken property fails the
# run. The long run (BENCHMARKS.md "Fuzzing") is scripts/fuzz.sh with a larger SECONDS.
step "fuzzing (each harness ${BROKER_FUZZ_SECONDS:-15} s)"
scripts/fuzz.sh --no-build "${BROKER_FUZZ_SECONDS:-15}"
step "all passed"
