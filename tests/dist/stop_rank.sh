#!/usr/bin/env bash
# A rank stopped for good (SIGSTOP) in the middle of epoch 2 of a 2-rank job: with
# TAPEGRAD_DIST_TIMEOUT=3 the other rank gives up waiting after 3 s (it does not spin for ever),
# and the job ends within seconds with a non-zero exit and one line naming rank 1 as the rank
# it waited for.
. "$(dirname "$0")/lib.sh"
require_engine
[ "$WORK" = --check ] && exit 0

export TAPEGRAD_DIST_TIMEOUT=3
dir=$WORK/stopped
signal_rank1 "$dir" STOP --epochs 4
wait_job 30
kill -KILL "$VICTIM" 2>/dev/null
echo "stopped rank 1: the job ended after $(($(date +%s) - T0)) s with exit status $JOB_RC"
[ "$JOB_RC" != 0 ] || fail "the job exited 0 after a rank was stopped"
lines=$(grep -c '^tapegrad' "$dir/stderr.txt")
[ "$lines" = 1 ] || fail "$lines lines from tapegrad, not 1: $(grep '^tapegrad' "$dir/stderr.txt")"
want='^tapegrad: rank 0 waited 3 s in (a broadcast|an exchange|a gather|a barrier|a vote) for rank 1, which did not answer \(stopped or hung\); ending the job \(TAPEGRAD_DIST_TIMEOUT=3\)$'
grep -E "$want" "$dir/stderr.txt" >/dev/null ||
  fail "the line does not name rank 1 as the one waited for: $(grep '^tapegrad' "$dir/stderr.txt")"
echo "$(grep '^tapegrad' "$dir/stderr.txt")"
