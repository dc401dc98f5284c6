# Sourced by the wall-clock benchmark scripts (floor.sh, compare.sh): busy loops beside the measurement.
#
# On this VM kind a core that goes idle costs the guest a halt and a wake-up from its host, and how much that
# costs moves from hour to hour: four quiet floor.sh runs of one session read the mint at 191–265 µs of CPU per
# request. With a busy loop per core at the lowest priority no core ever idles; the servers, wrk and
# `openssl speed` still get ~98% of a core each (nice 19 weighs 15 against nice 0's 1,024), and the same
# measurements read within a few percent of each other (BENCHMARKS.md, tenth session). BUSY=0 measures a quiet
# machine instead.

# start_busy [N]: N loops (default: BUSY, else one per core) at nice 19; their pids in BUSY_PIDS.
BUSY_PIDS=()
start_busy() {
  local count=${1:-${BUSY:-$(nproc)}}
  for _ in $(seq "$count"); do
    nice -n 19 sh -c 'while :; do :; done' >/dev/null 2>&1 &
    BUSY_PIDS+=("$!")
  done
}

# stop_busy: ends them (each script's exit trap calls it).
stop_busy() {
  for pid in "${BUSY_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  BUSY_PIDS=()
}

# busy_words: how the section's Command line names the condition.
busy_words() {
  if [ "${#BUSY_PIDS[@]}" -eq 0 ]; then echo "nothing else running"; else echo "${#BUSY_PIDS[@]} busy loops at nice 19 beside it"; fi
}
