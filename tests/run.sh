#!/usr/bin/env bash
# Runs every doctest binary of one build dir, echoes doctest's own output, and tallies the counts
# into build/test-counts.txt; `run.sh --summary` prints the total as "tests: N passed, N failed".
#
# TEST_JOBS binaries run at once (default: the cores, at most 2): much of the suite waits on
# processes it starts (mpirun jobs, the CLI, fsync), so two overlap where one would idle. The
# slowest start first; each binary's output is printed whole when it ends, with its wall time.
set -uo pipefail
counts=build/test-counts.txt
if [ "${1:-}" = "--summary" ]; then
  [ -f "$counts" ] || { echo "tests: no test ran"; exit 1; }
  awk '{p += $2; f += $3} END {printf "tests: %d passed, %d failed\n", p, f; exit (f > 0 || p == 0)}' "$counts"
  exit $?
fi
label=$1 dir=$2
mkdir -p build
jobs=${TEST_JOBS:-$(nproc)}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: TEST_JOBS must be a positive integer, got '$jobs'"; exit 2; }
[ -n "${TEST_JOBS:-}" ] || [ "$jobs" -le 2 ] || jobs=2
slow_first="test_dist test_dist_faults test_train test_bench_errors test_kernels test_tokenizer"
exes=()
for name in $slow_first; do [ -x "$dir/tests/$name" ] && exes+=("$dir/tests/$name"); done
for exe in "$dir"/tests/test_*; do
  [ -x "$exe" ] && [ -f "$exe" ] || continue
  [[ " $slow_first " == *" $(basename "$exe") "* ]] || exes+=("$exe")
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One binary: its output into $work/NAME.log, its exit status and wall time into $work/NAME.rc.
run_one() {
  local exe=$1 name start rc
  name=$(basename "$exe")
  start=$SECONDS
  "$exe" --no-intro=true >"$work/$name.log" 2>&1
  rc=$?
  echo "$rc $((SECONDS - start))" >"$work/$name.rc"
}

# Prints and tallies a finished binary.
report() {
  local name=$1 rc secs line passed failed
  read -r rc secs <"$work/$name.rc"
  echo "== $label: $name"
  cat "$work/$name.log"
  echo "== $label: $name took $secs s"
  line=$(grep -E '^\[doctest\] test cases:' "$work/$name.log" | tail -1)
  passed=$(sed -E 's/.*\| *([0-9]+) passed.*/\1/' <<<"$line")
  failed=$(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<<"$line")
  [[ "$passed" =~ ^[0-9]+$ ]] || passed=0
  [[ "$failed" =~ ^[0-9]+$ ]] || failed=1   # no summary line: the binary crashed
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  echo "$label/$name $passed $failed" >>"$counts"
  [ "$rc" -eq 0 ] || status=1
}

status=0
pending=()  # names started and not yet reported
report_finished() {
  local keep=() name
  for name in "${pending[@]}"; do
    if [ -f "$work/$name.rc" ]; then report "$name"; else keep+=("$name"); fi
  done
  pending=("${keep[@]}")
}
for exe in "${exes[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; report_finished; done
  run_one "$exe" &
  pending+=("$(basename "$exe")")
done
wait
report_finished
exit $status
