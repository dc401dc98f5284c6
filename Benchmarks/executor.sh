#!/usr/bin/env bash
# Where Swift concurrency's jobs run in `broker serve` (issue "Close to the floor"): the event loops as jobs of no
# isolation (the default, EventLoopConcurrency) against NIO's own take-over (BROKER_CONCURRENCY_EXECUTOR=nio, each
# job isolated to its loop) or Swift's own pool (AGAINST=dispatch). The same release binary run both ways, through
# Benchmarks/compare.sh — each endpoint measured in alternation, several rounds, CPU per request from /proc and
# the medians.
#   Benchmarks/executor.sh [rounds] [seconds-per-measurement]     (default 3 rounds of 6 s)
#   SCRATCH=.build-bench AGAINST=dispatch Benchmarks/executor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SCRATCH=${SCRATCH:-.build}
AGAINST=${AGAINST:-nio}
case $AGAINST in
  nio) LABEL="NIO's take-over" ;;
  dispatch) LABEL="Swift's pool" ;;
  *) echo "executor.sh: AGAINST is nio or dispatch" >&2 && exit 2 ;;
esac
swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
BIN=$PWD/$SCRATCH/release/broker-full
BEFORE_ENV=BROKER_CONCURRENCY_EXECUTOR=$AGAINST BEFORE_LABEL="$LABEL" AFTER_LABEL="the event loops, no isolation" \
  exec Benchmarks/compare.sh "$BIN" "$BIN" "${1:-3}" "${2:-6}"
