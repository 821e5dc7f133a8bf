# Shared by the scripts of tests/dist/ (sourced, not run). Each script is run by tests/test_dist
# as `SCRIPT TAPEGRAD CKPT_COMPARE WORKDIR` and exits 0 (passed), 1 (failed, the reason on stderr)
# or 77 (cannot run here, the reason on stdout); `SCRIPT TAPEGRAD CKPT_COMPARE --check` only
# answers whether it could run. Every mpirun is bounded by a timeout, so a hang is a failure.
set -uo pipefail

TAPEGRAD=$1 COMPARE=$2 WORK=$3
TESTS_DIST=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$TESTS_DIST/../.." && pwd)
# Open MPI refuses to start processes as root without both; the tests run as root in containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# No warnings about an unused network device or a missing Infiniband card in the logs we compare.
export OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_rmaps_base_oversubscribe=1
# A rank waiting in MPI yields its core instead of spinning: the tests share 2 cores with builds
# (an epoch below took 27 s spinning, 15 s yielding, on a machine at load 30).
export OMPI_MCA_mpi_yield_when_idle=1
# In the sanitizer build: Open MPI's own allocations outlive MPI_Finalize, so no leak check.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

skip() { echo "$*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# The engine is built into TAPEGRAD: linked with MPI, and it knows --micro-batches.
require_engine() {
  command -v mpirun >/dev/null || skip "mpirun not installed (Open MPI: openmpi-bin)"
  [ -x "$TAPEGRAD" ] || skip "no tapegrad at $TAPEGRAD"
  # Output in variables: `cmd | grep -q` fails under pipefail when grep stops reading early.
  local libs refusal
  libs=$(ldd "$TAPEGRAD" 2>/dev/null)
  [[ "$libs" == *libmpi* ]] || skip "tapegrad was built without MPI (meson -Dmpi)"
  refusal=$("$TAPEGRAD" train --micro-batches 0 2>&1)
  [[ "$refusal" != *"unknown option"* ]] || skip "tapegrad train has no --micro-batches yet"
}

# A small training run: the tiny preset (dropout 0.1) on the first 15 KB of the bundled story,
# byte tokens, context 32: 105 steps an epoch at batch 4, a few ms each. Extra options follow.
train_args() {
  echo --text "$WORK/text.txt" --preset tiny --tokenizer bpe:256 --context 32 \
    --batch-size 4 --eval-freq 20 --eval-iter 2 --threads 1 --no-progress --overwrite
}

# What two runs that promise the same numbers must print alike: stdout without the line that
# carries the wall time and the output path.
log_of() { grep -v 'Training completed in' "$1"; }
# The JSON log without its "seconds" field.
jsonl_of() { sed -E 's/, *"seconds": *[-0-9.e+]+//' "$1"; }

# Fails unless the two runs (directories with stdout.txt, log.jsonl, out/) agree: the book's
# lines, the JSON log and every tensor and state entry of the checkpoint.
same_run() {
  local a=$1 b=$2
  diff <(log_of "$a/stdout.txt") <(log_of "$b/stdout.txt") >&2 || fail "$a and $b print different logs"
  diff <(jsonl_of "$a/log.jsonl") <(jsonl_of "$b/log.jsonl") >&2 || fail "$a and $b log different JSON"
  "$COMPARE" "$a/out/checkpoint.safetensors" "$b/out/checkpoint.safetensors" >&2 ||
    fail "$a and $b wrote different checkpoints"
}

# Runs `tapegrad train ARGS` in one process into directory DIR (stdout.txt, stderr.txt, log.jsonl,
# out/); returns its exit status.
run_single() {
  local dir=$1; shift
  mkdir -p "$dir"
  timeout 300 "$TAPEGRAD" train $(train_args) --out "$dir/out" --log "$dir/log.jsonl" "$@" \
    >"$dir/stdout.txt" 2>"$dir/stderr.txt"
}

# Metadata entry KEY of checkpoint FILE (its JSON header is text: "KEY":"VALUE").
checkpoint_meta() {
  head -c 65536 "$1" | grep -a -o "\"$2\": *\"[^\"]*\"" | head -1 | sed -E 's/.*: *"(.*)"/\1/'
}

# The pids of the rank processes mpirun MPIRUN_PID started on this host, as "rank pid" lines.
rank_pids() {
  local p
  for p in $(pgrep -P "$1"); do
    local r
    r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$r" ] && echo "$r $p"
  done
}

# Waits (up to SECONDS) until FILE exists; fails otherwise, or as soon as process PID ends.
wait_for_file() {
  local file=$1 seconds=$2 pid=$3 i
  for ((i = 0; i < seconds * 20; ++i)); do
    [ -e "$file" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "the job ended before $file appeared"
    sleep 0.05
  done
  fail "$file did not appear within $seconds s"
}

# Waits (up to SECONDS) until FILE holds a whole line; fails otherwise, or once process PID ends.
wait_until_line() {
  local file=$1 seconds=$2 pid=$3 i
  for ((i = 0; i < seconds * 20; ++i)); do
    [ -s "$file" ] && [ "$(tail -c 1 "$file")" = "" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "the job ended before $file had a line"
    sleep 0.05
  done
  fail "$file had no line within $seconds s"
}

if [ "$WORK" != --check ]; then
  mkdir -p "$WORK" && head -c 15000 "$ROOT/data/sample/sample.txt" >"$WORK/text.txt" ||
    fail "cannot make $WORK/text.txt"
fi

# Runs `mpirun -np N tapegrad train ARGS` into directory DIR, as run_single does.
run_mpi() {
  local dir=$1 n=$2; shift 2
  mkdir -p "$dir"
  timeout 300 mpirun -np "$n" "$TAPEGRAD" train $(train_args) --out "$dir/out" \
    --log "$dir/log.jsonl" "$@" >"$dir/stdout.txt" 2>"$dir/stderr.txt"
}

# Starts run_mpi in the background (its pid in MPI_JOB, mpirun's in MPIRUN) and waits until FILE
# appears: `start_mpi_job_until DIR N FILE ARGS...`.
start_mpi_job_until() {
  local dir=$1 n=$2 file=$3; shift 3
  run_mpi "$dir" "$n" "$@" &
  MPI_JOB=$!
  wait_for_file "$file" 120 "$MPI_JOB"
  MPIRUN=$(pgrep -x mpirun -P "$(pgrep -x timeout -P "$MPI_JOB" || echo "$MPI_JOB")")
  [ -n "$MPIRUN" ] || fail "no mpirun under job $MPI_JOB"
}

# start_mpi_job_until the checkpoint of the first epoch, and a little more: the job is then
# mid-step in epoch 2.
start_mpi_job() {
  local dir=$1 n=$2; shift 2
  start_mpi_job_until "$dir" "$n" "$dir/out/checkpoint.safetensors" "$@"
  sleep 0.1
}

# The pid of rank R of the job start_mpi_job started.
pid_of_rank() {
  rank_pids "$MPIRUN" | awk -v r="$1" '$1 == r {print $2}'
}

# start_mpi_job with 2 ranks in DIR (options follow), then signal SIG to rank 1: its pid in
# VICTIM, the time the signal left in T0.
signal_rank1() {
  local dir=$1 sig=$2; shift 2
  start_mpi_job "$dir" 2 "$@"
  VICTIM=$(pid_of_rank 1)
  [ -n "$VICTIM" ] || fail "rank 1 not found among mpirun's children"
  kill -"$sig" "$VICTIM"
  T0=$(date +%s)
}

# Where each rank of the job is: its state and, with gdb, every thread's innermost frames.
show_stuck_ranks() {
  local r p
  while read -r r p; do
    echo "rank $r (pid $p): $(grep -E '^State' "/proc/$p/status" 2>/dev/null)"
    command -v gdb >/dev/null &&
      gdb -p "$p" -batch -ex 'thread apply all bt 12' 2>/dev/null | grep -E '^(#|Thread)'
  done < <(rank_pids "$MPIRUN")
}

# Waits for the background job to end within SECONDS (else fails, killing it); its exit status
# in JOB_RC.
wait_job() {
  local seconds=$1 i
  for ((i = 0; i < seconds * 10; ++i)); do
    kill -0 "$MPI_JOB" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$MPI_JOB" 2>/dev/null; then
    show_stuck_ranks >&2
    kill -KILL "$MPIRUN" 2>/dev/null
    fail "the job did not end within $seconds s"
  fi
  wait "$MPI_JOB"
  JOB_RC=$?
}

# Resumes run DIR (its out/) into DIR/resumed (stdout.txt, stderr.txt), with LAUNCH before the
# command (nothing, or mpirun -np N) and the extra options after it; returns its exit status.
resume() {
  local dir=$1 launch=$2; shift 2
  mkdir -p "$dir/resumed"
  timeout 300 $launch "$TAPEGRAD" train --resume "$dir/out" --log "$dir/log.jsonl" --no-progress \
    "$@" >"$dir/resumed/stdout.txt" 2>"$dir/resumed/stderr.txt"
}

# Fails unless run DIR, resumed into DIR/resumed, ends where the uninterrupted run REF does: the
# same final checkpoint, and the resumed run prints the last lines of REF's log. With `whole`,
# DIR's own log followed by the resumed one must be REF's log, line for line.
resumed_like() {
  local ref=$1 dir=$2 whole=${3:-}
  "$COMPARE" "$ref/out/checkpoint.safetensors" "$dir/out/checkpoint.safetensors" >&2 ||
    fail "the resumed run's checkpoint differs from the uninterrupted run's"
  local got
  got=$(log_of "$dir/resumed/stdout.txt")
  [ -n "$whole" ] && got=$(log_of "$dir/stdout.txt"; echo "$got")
  local n
  n=$(wc -l <<<"$got")
  diff <(log_of "$ref/stdout.txt" | tail -n "$n") <(echo "$got") >&2 ||
    fail "the resumed run does not print the uninterrupted run's log"
  [ -z "$whole" ] || [ "$n" = "$(log_of "$ref/stdout.txt" | wc -l)" ] ||
    fail "the interrupted and resumed runs print $n lines, the uninterrupted run more"
}
