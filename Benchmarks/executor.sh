#!/usr/bin/env bash
# Swift concurrency's own thread pool against NIO's event loops as its global executor (the default since
# issue "Close to the floor"): the same release binary run both ways (BROKER_CONCURRENCY_EXECUTOR=dispatch or
# not), through Benchmarks/compare.sh — each endpoint measured in alternation, several rounds, CPU per request
# from /proc and the medians.
#   Benchmarks/executor.sh [rounds] [seconds-per-measurement]     (default 3 rounds of 6 s)
#   SCRATCH=.build-bench Benchmarks/executor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SCRATCH=${SCRATCH:-.build}
swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
BIN=$PWD/$SCRATCH/release/broker-full
BEFORE_ENV=BROKER_CONCURRENCY_EXECUTOR=dispatch BEFORE_LABEL="Swift's pool" AFTER_LABEL="NIO's loops" \
  exec Benchmarks/compare.sh "$BIN" "$BIN" "${1:-3}" "${2:-6}"
