#!/usr/bin/env bash
# Runs every test: formatting lint, the Swift test suites (unit, loopback HTTP, real binary, Python interop),
# then every fuzz harness for a short time.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

echo "== swift format lint" >&2
swift format lint --strict -r Sources Providers Tests Benchmarks Fuzz Package.swift

echo "== swift build" >&2
swift build

# The load suite saturates every core with scrypt for tens of seconds (and its database-outage test stops the
# shared PostgreSQL cluster, its crash test kills brokers fifty times); on a 2-core CI machine it would starve
# the other suites' servers (a single registration then misses the CLI's 30 s timeout). It runs on its own,
# after everything else has run in parallel.
# Every suite runs beside one throw-away PostgreSQL cluster (scripts/with-postgres.sh): the store contract and
# the scale-out tests use it. The PostgreSQL tests alone: scripts/with-postgres.sh swift test --filter Postgres
# scripts/install.sh, twice (the second run must be harmless), into a throw-away prefix; InstallTests checks
# and uninstalls it. It runs here because it builds, and SwiftPM holds its build lock while `swift test` runs.
install_prefix=$(mktemp -d)
trap 'rm -rf "$install_prefix"' EXIT
echo "== scripts/install.sh --prefix $install_prefix --configuration debug (twice)" >&2
scripts/install.sh --prefix "$install_prefix" --configuration debug
scripts/install.sh --prefix "$install_prefix" --configuration debug
export BROKER_TEST_INSTALL_PREFIX=$install_prefix

# Each run is bounded (scripts/bounded.sh): a stalled run prints every thread's stack and fails, well inside
# CI's 90 minutes, instead of running into that limit with nothing said. On a 2-core CI machine the first
# takes about 12 minutes (building the tests included) and the load suite about 4.
echo "== swift test (all but the load suite, in parallel)" >&2
scripts/bounded.sh 40 scripts/with-postgres.sh swift test --skip LoadTests
echo "== swift test (the load suite, alone)" >&2
scripts/bounded.sh 20 scripts/with-postgres.sh swift test --skip-build --filter LoadTests

# Each libFuzzer harness (Fuzz/) from its seed corpus for a short time: a crash or broken property fails the
# run. The long run (BENCHMARKS.md "Fuzzing") is scripts/fuzz.sh with a larger SECONDS.
echo "== fuzzing (each harness ${BROKER_FUZZ_SECONDS:-15} s)" >&2
scripts/fuzz.sh "${BROKER_FUZZ_SECONDS:-15}"
