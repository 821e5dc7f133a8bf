#!/usr/bin/env bash
# Runs every doctest binary of one build dir, echoes doctest's own output, and tallies the counts
# into build/test-counts.txt; `run.sh --summary` prints the total as "tests: N passed, N failed".
set -uo pipefail
counts=build/test-counts.txt
if [ "${1:-}" = "--summary" ]; then
  [ -f "$counts" ] || { echo "tests: no test ran"; exit 1; }
  awk '{p += $2; f += $3} END {printf "tests: %d passed, %d failed\n", p, f; exit (f > 0 || p == 0)}' "$counts"
  exit $?
fi
label=$1 dir=$2
mkdir -p build
status=0
for exe in "$dir"/tests/test_*; do
  [ -x "$exe" ] && [ -f "$exe" ] || continue
  log=$(mktemp)
  echo "== $label: $(basename "$exe")"
  start=$SECONDS
  "$exe" --no-intro=true 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # each binary's wall time, so a CI log shows where make test's minutes go
  echo "== $label: $(basename "$exe") took $((SECONDS - start)) s"
  line=$(grep -E '^\[doctest\] test cases:' "$log" | tail -1)
  passed=$(sed -E 's/.*\| *([0-9]+) passed.*/\1/' <<<"$line")
  failed=$(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<<"$line")
  [[ "$passed" =~ ^[0-9]+$ ]] || passed=0
  [[ "$failed" =~ ^[0-9]+$ ]] || failed=1   # no summary line: the binary crashed
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  echo "$label/$(basename "$exe") $passed $failed" >>"$counts"
  [ "$rc" -eq 0 ] || status=1
  rm -f "$log"
done
exit $status
