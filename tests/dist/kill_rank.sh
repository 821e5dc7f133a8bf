#!/usr/bin/env bash
# A rank killed with SIGKILL in the middle of epoch 2 of a 2-rank job: the job ends within
# seconds with a non-zero exit and a line naming rank 1; the checkpoint of epoch 1 is intact, and
# `--resume` under mpirun continues to exactly the end of an uninterrupted run.
. "$(dirname "$0")/lib.sh"
require_engine
[ "$WORK" = --check ] && exit 0

run_mpi "$WORK/ref" 2 --epochs 4 || fail "the uninterrupted run failed: $(tail -3 "$WORK/ref/stderr.txt")"

dir=$WORK/killed
signal_rank1 "$dir" KILL --epochs 4
wait_job 20
echo "killed rank 1: the job ended after $(($(date +%s) - T0)) s with exit status $JOB_RC"
[ "$JOB_RC" != 0 ] || fail "the job exited 0 after a rank was killed"
grep -E 'rank 1\b' "$dir/stderr.txt" >/dev/null ||
  fail "no line names rank 1: $(tail -5 "$dir/stderr.txt")"

resume "$dir" "mpirun -np 2" --epochs 4 || fail "--resume failed: $(tail -3 "$dir/resumed/stderr.txt")"
resumed_like "$WORK/ref" "$dir"
echo "resumed after the kill: same log and checkpoint as the uninterrupted run"
