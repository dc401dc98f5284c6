#!/usr/bin/env bash
# Runs every test: formatting lint, the Swift test suites (unit, loopback HTTP, real binary, Python interop),
# then every fuzz harness for a short time.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

echo "== swift format lint" >&2
swift format lint --strict -r Sources Providers Tests Benchmarks Fuzz Plugins Package.swift

# Quiet (errors only) here and in the test runs below: the build's progress lines alone come to 200 kB, and a
# CI page keeps only the first 512 kB of a run's output, so a failure near the end would not be seen.
# With the tests, and with SwiftPM's check that every target imports only the targets it declares (a target
# that reaches another through a third's dependencies builds today and breaks when the third changes).
echo "== swift build (the tests too; undeclared target imports are errors)" >&2
swift build --quiet --build-tests --explicit-target-dependency-import-check error

# The load suite saturates every core with scrypt for tens of seconds (and its database-outage test stops the
# shared PostgreSQL cluster, its crash test kills brokers fifty times); on a 2-core CI machine it would starve
# the other suites' servers (a single registration then misses the CLI's 30 s timeout). It runs on its own,
# after everything else has run in parallel.
# Every suite runs beside one throw-away PostgreSQL cluster (scripts/with-postgres.sh): the store contract and
# the scale-out tests use it. The PostgreSQL tests alone: scripts/with-postgres.sh swift test --filter Postgres
#
# scripts/install.sh as users run it — the release configuration — twice (the second run must be harmless), into
# a throw-away prefix; InstallTests then runs what it installed and uninstalls it. It builds in a scratch folder
# of its own (.build-install), so it needs no build lock of the suites'; it runs in the background beside the
# fuzzing at the end, whose harnesses run for a fixed time and measure nothing, never beside the suites (a release
# build beside them starved their servers: a PostgreSQL connection then missed its 5 s). Its output goes to a log,
# printed only if it fails.
install_prefix=$(mktemp -d)
install_log=$(mktemp)
suite_log=$(mktemp)
install_pid=
# A failed step ends the run: the install's whole process tree goes with it.
kill_tree() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}
trap '[ -n "$install_pid" ] && kill_tree "$install_pid"; rm -rf "$install_prefix" "$install_log" "$suite_log"' EXIT
start_install() {
    echo "== scripts/install.sh --prefix $install_prefix (release, twice; in the background)" >&2
    (scripts/install.sh --prefix "$install_prefix" && scripts/install.sh --prefix "$install_prefix") \
        >"$install_log" 2>&1 &
    install_pid=$!
}
wait_for_install() {
    local status=0
    wait "$install_pid" || status=$?
    install_pid=
    if [ "$status" -ne 0 ]; then
        {
            echo "== FAILED (exit $status): scripts/install.sh --prefix $install_prefix"
            tail -n 80 "$install_log"
        } >&2
        exit "$status"
    fi
    grep -a '^installed broker' "$install_log" >&2 || true
}

# Each run is bounded (scripts/bounded.sh): a stalled run prints every thread's stack and fails, well inside
# CI's 90 minutes, instead of running into that limit with nothing said. On a 2-core CI machine the first
# takes about 12 minutes (building the tests included) and the load suite about 4.
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
echo "== swift test (unit and in-process suites)" >&2
run_suite 40 swift test $verbosity --skip BrokerEndToEndTests
echo "== swift test (end to end: processes, all but the load suite and the installed tree)" >&2
run_suite 40 swift test $verbosity --skip-build --filter BrokerEndToEndTests --skip LoadTests --skip InstallTests
echo "== swift test (the load suite, alone)" >&2
run_suite 20 swift test $verbosity --skip-build --filter LoadTests

# Each libFuzzer harness (Fuzz/) from its seed corpus for a short time: a crash or broken property fails the
# run. The long run (BENCHMARKS.md "Fuzzing") is scripts/fuzz.sh with a larger SECONDS.
start_install
echo "== fuzzing (each harness ${BROKER_FUZZ_SECONDS:-15} s)" >&2
scripts/fuzz.sh "${BROKER_FUZZ_SECONDS:-15}"
wait_for_install
echo "== swift test (the installed tree: InstallTests)" >&2
export BROKER_TEST_INSTALL_PREFIX=$install_prefix
run_suite 10 swift test $verbosity --skip-build --filter InstallTests
