#!/usr/bin/env bash
# What mpirun starts, checked before any step: a launcher size of 1 is today's run, bit for bit;
# two ranks given different options refuse at start with one line naming the option and write
# no checkpoint.
. "$(dirname "$0")/lib.sh"
require_engine
[ "$WORK" = --check ] && exit 0

run_single "$WORK/single" --epochs 1 || fail "the single process failed: $(tail -3 "$WORK/single/stderr.txt")"
run_mpi "$WORK/np1" 1 --epochs 1 || fail "mpirun -np 1 failed: $(tail -3 "$WORK/np1/stderr.txt")"
same_run "$WORK/single" "$WORK/np1"

dir=$WORK/mismatch
mkdir -p "$dir"
timeout 60 mpirun -np 1 "$TAPEGRAD" train $(train_args) --epochs 1 --out "$dir/out" --lr 4e-4 : \
  -np 1 "$TAPEGRAD" train $(train_args) --epochs 1 --out "$dir/out" --lr 5e-4 \
  >"$dir/stdout.txt" 2>"$dir/stderr.txt"
rc=$?
[ $rc != 0 ] && [ $rc != 124 ] || fail "ranks with different --lr: exit status $rc"
lines=$(grep -c '^tapegrad' "$dir/stderr.txt")
[ "$lines" = 1 ] || fail "ranks with different --lr: $lines lines from tapegrad, not 1: $(cat "$dir/stderr.txt")"
grep '^tapegrad' "$dir/stderr.txt" | grep -q -- 'lr' ||
  fail "the refusal does not name --lr: $(grep '^tapegrad' "$dir/stderr.txt")"
[ ! -e "$dir/out/checkpoint.safetensors" ] || fail "ranks with different options wrote a checkpoint"
[ ! -s "$dir/stdout.txt" ] || fail "ranks with different options printed a log: $(head -2 "$dir/stdout.txt")"
echo "np 1 is today's run; different options refused: $(grep '^tapegrad' "$dir/stderr.txt")"
