#!/usr/bin/env bash
# tests/fuzz/run.sh [SECONDS]: builds the libFuzzer targets (clang, ASan + UBSan, in build/fuzz) and
# runs each for SECONDS (default 60), EDGEFL_FUZZ_JOBS targets at a time (default: one per core).
# Exits non-zero on any crash, sanitizer report, leak, timeout or out-of-memory; the input that
# caused it is left in build/fuzz/artifacts/ (replay: build/fuzz/tests/fuzz/<target> <file>). New
# corpus entries accumulate in build/fuzz/corpus/<target>/ between runs; the seeds are regenerated
# by the build.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "usage: tests/fuzz/run.sh [SECONDS]" >&2
  exit 2
fi

# The targets run EDGEFL_FUZZ_JOBS at a time (default: one per core), each for SECONDS.
jobs="${EDGEFL_FUZZ_JOBS:-$(nproc)}"
if ! [[ "$jobs" =~ ^[0-9]+$ ]] || ((jobs < 1)); then
  echo "tests/fuzz/run.sh: EDGEFL_FUZZ_JOBS must be a whole number of at least 1, not '$jobs'" >&2
  exit 2
fi
build=build/fuzz

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEDGEFL_FUZZ=ON -DEDGEFL_FATAL_WARNINGS=ON -DEDGEFL_BUILD_TESTS=OFF -DEDGEFL_BUILD_TOOLS=OFF \
  -DEDGEFL_BUILD_EXAMPLES=OFF -DEDGEFL_BUILD_NET=OFF >/dev/null
cmake --build "$build" --target edgefl_fuzz -j2

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$build/artifacts"

# One target's run; its exit status goes to $build/<name>.status (the summary reads it).
fuzz_one() {
  local name="$1" binary="$2" seeds="$3" corpus="$build/corpus/$1" status=0
  mkdir -p "$corpus"
  "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$name-" "$corpus" "$seeds" >"$build/$name.log" 2>&1 || status=$?
  echo "$status" >"$build/$name.status"
}

names=()
running=0
while IFS='|' read -r name binary seeds; do
  [[ -n "$name" ]] || continue
  names+=("$name")
  rm -f "$build/$name.status"
  if ((running >= jobs)); then
    wait -n
    running=$((running - 1))
  fi
  echo "=== fuzz: $name, ${seconds} s"
  fuzz_one "$name" "$binary" "$seeds" &
  running=$((running + 1))
done <"$build/fuzz-targets.txt"
wait

failed=0
summary=()
for name in "${names[@]}"; do
  log="$build/$name.log"
  status=$(cat "$build/$name.status" 2>/dev/null || echo "no status")
  echo "=== fuzz: $name"
  # The summary: corpus loaded, final coverage, executions and speed.
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$log" || true
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  summary+=("$(printf '%-16s %14s executions %10s/s  %s' "$name" "${execs:-?}" "${speed:-?}" \
    "$([[ "$status" == 0 ]] && echo ok || echo FAILED)")")
  if [[ "$status" != 0 ]]; then
    echo "fuzz: $name FAILED (exit $status); the end of $log:"
    tail -n 40 "$log"
    failed=1
  fi
done
echo "=== fuzz summary (${seconds} s per target, ${jobs} at a time)"
printf '%s\n' "${summary[@]}"
exit "$failed"
