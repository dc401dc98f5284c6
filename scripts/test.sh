#!/usr/bin/env bash
# Runs every test: formatting lint, the Swift test suites (unit, loopback HTTP, real binary, Python interop).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

echo "== swift format lint" >&2
swift format lint --strict -r Sources Providers Tests Benchmarks Package.swift

echo "== swift build" >&2
swift build

echo "== swift test" >&2
swift test
