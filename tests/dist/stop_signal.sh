#!/usr/bin/env bash
# Stopping a 2-rank job in the middle of epoch 2:
#   - SIGTERM (SIGINT) to one rank, as a scheduler or `kill` sends it: every rank stops at the same
#     step boundary, rank 0 saves, the job exits 143 (130); resuming in one process with
#     --micro-batches 2 prints the rest of the uninterrupted run's log and ends in its checkpoint.
#   - SIGTERM to mpirun (what Ctrl-C in its terminal does too): Open MPI 4.1's mpirun passes
#     SIGTERM to every rank one second later and exits 1; the ranks stop at one step boundary,
#     rank 0 saves within the second before mpirun's SIGKILL, and --resume continues exactly.
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
  stop=$(grep -oE "^stopped by SIG$name after (step|epoch)" "$dir/stderr.txt") ||
    fail "SIG$name to rank 1: rank 0 did not stop"
  batch=$(checkpoint_meta "$dir/out/checkpoint.safetensors" batch)
  [ "${stop##* }" = epoch ] || [ "${batch:-0}" != 0 ] ||
    fail "SIG$name to rank 1: the checkpoint is not the stop's (batch ${batch:-?} of an epoch)"
  resume "$dir" "" --epochs 4 --micro-batches 2 || fail "--resume failed: $(tail -3 "$dir/resumed/stderr.txt")"
  resumed_like "$WORK/ref" "$dir" whole
done

# SIGTERM to mpirun. Open MPI 4.1's mpirun sends the ranks SIGCONT at once, SIGTERM one second
# later (odls_base_sigkill_timeout) and SIGKILL a second after that, and exits 1. A 4-epoch job
# signalled after its first epoch used to end within that second, before any rank heard of the
# stop; this job has 40 epochs, is signalled as soon as it trains (step 0's evaluation is in the
# JSON log; before that rank 0 learns the tokenizer, seconds under load), and is compared with an uninterrupted run to the end of the epoch where it stopped.
# The ranks get 3 s, not 1, between SIGTERM and SIGKILL: at load 10 the step and the save took
# more than a second (mpirun killed the ranks before any checkpoint, 1 run in 4).
dir=$WORK/mpirun-TERM
export OMPI_MCA_odls_base_sigkill_timeout=3
start_mpi_job_until "$dir" 2 "$dir/log.jsonl" --epochs 40
unset OMPI_MCA_odls_base_sigkill_timeout
# The JSON log is made empty at start; its first line is step 0's evaluation.
wait_until_line "$dir/log.jsonl" 120 "$MPI_JOB"
kill -TERM "$MPIRUN"
wait_job 30
echo "SIGTERM to mpirun: exit status $JOB_RC"
[ "$JOB_RC" = 1 ] || fail "SIGTERM to mpirun: exit status $JOB_RC, not mpirun's 1: $(tail -3 "$dir/stderr.txt")"
! grep 'exited on signal' "$dir/stderr.txt" >&2 || fail "SIGTERM to mpirun: a rank died of a signal"
# A step's end, or an epoch's (the signal often lands while rank 0 writes the epoch's sample).
stop=$(grep -oE '^stopped by SIGTERM after (step|epoch)' "$dir/stderr.txt") ||
  fail "SIGTERM to mpirun: rank 0 did not stop at a step boundary: $(tail -3 "$dir/stderr.txt")"
epoch=$(checkpoint_meta "$dir/out/checkpoint.safetensors" epoch)
batch=$(checkpoint_meta "$dir/out/checkpoint.safetensors" batch)
[ -n "$epoch" ] && { [ "${stop##* }" = epoch ] || [ "${batch:-0}" != 0 ]; } ||
  fail "SIGTERM to mpirun: the checkpoint is not the stop's (epoch ${epoch:-?}, batch ${batch:-?})"
end=$((epoch + 1))
echo "SIGTERM to mpirun: stopped in epoch $end at batch $batch"
run_mpi "$WORK/ref$end" 2 --epochs $end ||
  fail "the uninterrupted $end-epoch run failed: $(tail -3 "$WORK/ref$end/stderr.txt")"
resume "$dir" "mpirun -np 2" --epochs $end || fail "--resume failed: $(tail -3 "$dir/resumed/stderr.txt")"
resumed_like "$WORK/ref$end" "$dir" whole
echo "stopped by SIGTERM to mpirun and resumed: same log and checkpoint as the uninterrupted run"
