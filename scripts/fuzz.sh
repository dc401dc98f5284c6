#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [HARNESS ...]
# scripts/fuzz.sh --build-only [HARNESS ...]
# scripts/fuzz.sh --no-build SECONDS [HARNESS ...]
#
# Builds the libFuzzer harnesses of Fuzz/ (swiftc -sanitize=fuzzer,address, in their own scratch folder) and
# runs each for SECONDS (default 60) from its committed seed corpus (Fuzz/corpus/<harness>); what libFuzzer
# learns goes to the scratch folder, never into git. Prints each harness's executions and their total, and
# exits 1 when a harness crashed, broke a property, timed out on an input or ran out of memory; the input that
# did it is kept under <scratch>/findings/<harness>/ (replay: BROKER_FUZZ_DATA=Fuzz/data <binary> <file>).
#
# --build-only builds the harnesses and runs none (the test command builds them early, beside its other builds);
# --no-build runs what is built (eleven no-op builds cost the test command two minutes), failing on a missing one.
# Harnesses: json form jwt jwk phc oauth1 loopback config cache webauthn dbus (all when none are named).
# Environment: BROKER_FUZZ_BUILD (scratch folder, default .build-fuzz), BROKER_FUZZ_JOBS (harnesses run at
# once, default the number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

build_only=false
build=true
if [ "${1:-}" = --build-only ]; then build_only=true; shift; set -- 0 "$@"; fi
if [ "${1:-}" = --no-build ]; then build=false; shift; fi
seconds=${1:-60}
[ $# -gt 0 ] && shift
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(json form jwt jwk phc oauth1 loopback config cache webauthn dbus)
case "$seconds" in '' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;; esac

scratch=${BROKER_FUZZ_BUILD:-.build-fuzz}
jobs=${BROKER_FUZZ_JOBS:-$(nproc)}
export BROKER_FUZZ=1 BROKER_FUZZ_DATA="$PWD/Fuzz/data"
# The Swift runtime's own crash reporter would race libFuzzer's: leave crashes to libFuzzer.
export SWIFT_BACKTRACE=enable=no

for harness in "${harnesses[@]}"; do
  [ -d "Fuzz/$harness" ] || { echo "fuzz.sh: no harness '$harness' (Fuzz/$harness)" >&2; exit 2; }
  if $build; then
    echo "== building fuzz-$harness"
    swift build --scratch-path "$scratch" -Xswiftc -sanitize=fuzzer,address --sanitize=fuzzer --sanitize=address \
      --product "fuzz-$harness" 2>&1 | grep -Ev "ld.gold: warning: Cannot export local symbol|^\[[0-9]+/[0-9]+\]" || true
  fi
  [ -x "$scratch/debug/fuzz-$harness" ] || { echo "fuzz.sh: fuzz-$harness did not build" >&2; exit 1; }
  # The configuration loader checks provider sections against schemas alone: it links neither libcurl nor
  # OpenSSL (Package.swift, ProviderSchemaSupport). A dependency that drags them back in fails here.
  if [ "$harness" = config ] && ldd "$scratch/debug/fuzz-config" | grep -E 'libcurl|libssl|libcrypto\.' >&2; then
    echo "fuzz.sh: fuzz-config links libcurl or OpenSSL (above); the configuration loader must not" >&2
    exit 1
  fi
done
$build_only && exit 0

run() {
  local harness=$1 corpus="$scratch/corpus/$1" findings="$scratch/findings/$1/"
  mkdir -p "$corpus" "$findings"
  # -timeout: one input may take 10 s at most; -rss_limit_mb: a reader must not need gigabytes for an input
  # of at most -max_len bytes. The committed seeds are read as a second corpus and never written to.
  "$scratch/debug/fuzz-$harness" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -print_final_stats=1 -artifact_prefix="$findings" "$corpus" "Fuzz/corpus/$harness" \
    > "$scratch/fuzz-$harness.log" 2>&1
}
export -f run
export scratch seconds
status=0
printf '%s\n' "${harnesses[@]}" | xargs -P "$jobs" -I{} bash -c 'run {}' || status=1

total=0
printf '%-10s %14s %10s  %s\n' harness executions exec/s result
for harness in "${harnesses[@]}"; do
  log="$scratch/fuzz-$harness.log"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if grep -qE '^==[0-9]+==ERROR|^SUMMARY: |deadly signal|ALARM: working on the last Unit|out-of-memory|Fatal error' "$log"; then
    result="FAILED: $(grep -m1 -oE 'ERROR: [^(]*|Fatal error: .*|out-of-memory.*|timeout after.*' "$log" || echo 'see log')"
    echo "---- $log" >&2; grep -E 'ERROR|Fatal error|Test unit written|#[0-9]+ 0x' "$log" | head -30 >&2
    status=1
  elif [ -z "$runs" ]; then
    result="FAILED: no final stats (see $log)"
    status=1
  else
    result=ok
  fi
  total=$((total + ${runs:-0}))
  printf '%-10s %14s %10s  %s\n' "$harness" "${runs:-0}" "${speed:-0}" "$result"
done
printf '%-10s %14s\n' total "$total"
exit $status
