#!/usr/bin/env bash
# Stopping a 2-rank job in the middle of epoch 2:
#   - SIGTERM (SIGINT) to one rank, as a scheduler or `kill` sends it: every rank stops at the same
#     step boundary, rank 0 saves, the job exits 143 (130); resuming in one process with
#     --micro-batches 2 prints the rest of the uninterrupted run's log and ends in its checkpoint.
#   - SIGTERM to mpirun (what Ctrl-C in its terminal does too): Open MPI 4.1's mpirun passes
#     SIGTERM to every rank, kills them 1 s later (odls_base_sigkill_timeout) and exits 1 whatever
#     they return; so the job ends within seconds, non-zero, with an intact checkpoint, the stop's
#     or epoch 1's, from which --resume continues exactly.
. "$(dirname "$0")/lib.sh"
require_engine
[ "$WORK" = --check ] && exit 0

run_mpi "$WORK/ref" 2 --epochs 4 || fail "the uninterrupted run failed: $(tail -3 "$WORK/ref/stderr.txt")"

for sig in TERM:143 INT:130; do
  name=${sig%:*} want=${sig#*:} dir=$WORK/rank1-$name
  start_mpi_job "$dir" 2 --epochs 4
  kill -"$name" "$(pid_of_rank 1)"
  wait_job 30
  echo "SIG$name to rank 1: exit status $JOB_RC"
  [ "$JOB_RC" = "$want" ] || fail "SIG$name to rank 1: exit status $JOB_RC, not $want: $(tail -3 "$dir/stderr.txt")"
  # Stopped by the engine, not by the signal: rank 0 said where, saved there (mid-epoch: batch
  # > 0), and no rank died of a signal (a dead process's stdout would also be lost, unflushed).
  ! grep 'exited on signal' "$dir/stderr.txt" >&2 || fail "SIG$name to rank 1: a rank died of it"
  grep -qE '^stopped (by SIG(TERM|INT) )?after step' "$dir/stderr.txt" || fail "SIG$name to rank 1: rank 0 did not stop"
  batch=$(checkpoint_meta "$dir/out/checkpoint.safetensors" batch)
  [ "${batch:-0}" != 0 ] ||
    fail "SIG$name to rank 1: the checkpoint is not the stop's (batch ${batch:-?} of an epoch)"
  resume "$dir" "" --epochs 4 --micro-batches 2 || fail "--resume failed: $(tail -3 "$dir/resumed/stderr.txt")"
  resumed_like "$WORK/ref" "$dir" whole
done

dir=$WORK/mpirun-TERM
start_mpi_job "$dir" 2 --epochs 4
kill -TERM "$MPIRUN"
wait_job 30
echo "SIGTERM to mpirun: exit status $JOB_RC"
[ "$JOB_RC" != 0 ] || fail "SIGTERM to mpirun: exit status 0"
# Known gap (issue 25, open): on a quiet machine the job often runs to its end after mpirun's
# SIGTERM; until that is understood this case is reported as not tested, not passed.
if [ "$(checkpoint_meta "$dir/out/checkpoint.safetensors" epoch)" = 4 ]; then
  echo "NOT TESTED: SIGTERM to mpirun: the job ran to its end (epoch 4); no stop to resume from"
  exit 0
fi
resume "$dir" "mpirun -np 2" --epochs 4 || fail "--resume failed: $(tail -3 "$dir/resumed/stderr.txt")"
resumed_like "$WORK/ref" "$dir"
echo "stopped by a signal and resumed: same log and checkpoint as the uninterrupted run"
