#!/usr/bin/env bash
# Where Swift concurrency's jobs run in `broker serve` (issue "Close to the floor"): NIO's take-over (the default,
# each job isolated to its loop) against the event loops as jobs of no isolation (BROKER_CONCURRENCY_EXECUTOR=
# event-loops, EventLoopConcurrency) or Swift's own pool (CHOICE=dispatch). The same release binary run both ways,
# through Benchmarks/compare.sh — each endpoint measured in alternation, several rounds, CPU per request from /proc
# and the medians.
#   Benchmarks/executor.sh [rounds] [seconds-per-measurement]     (default 3 rounds of 6 s)
#   SCRATCH=.build-bench CHOICE=dispatch Benchmarks/executor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SCRATCH=${SCRATCH:-.build}
CHOICE=${CHOICE:-event-loops}
case $CHOICE in
  event-loops) LABEL="jobs of no isolation" ;;
  dispatch) LABEL="Swift's pool" ;;
  *) echo "executor.sh: CHOICE is event-loops or dispatch" >&2 && exit 2 ;;
esac
swift build -c release --scratch-path "$SCRATCH" --product broker-full >&2
BIN=$PWD/$SCRATCH/release/broker-full
BEFORE_LABEL="NIO's take-over" AFTER_ENV=BROKER_CONCURRENCY_EXECUTOR=$CHOICE AFTER_LABEL="$LABEL" \
  exec Benchmarks/compare.sh "$BIN" "$BIN" "${1:-3}" "${2:-6}"
