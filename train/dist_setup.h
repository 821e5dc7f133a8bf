// Setting up a run across ranks (dist_setup.cpp): rank 0's files and errors shared with the
// others, the micro-batch count, the start-up check that every rank runs one build with one set
// of options, and each rank's thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "train/train_options.h"

namespace tg::train {

// Rank 0 runs f; when it throws, every rank throws the same error (a TrainError or UsageError
// with its message), so no rank waits for a broadcast that will not come. No rank returns before
// rank 0's f has ended (its outcome is broadcast): after a stop, no rank exits while rank 0 still
// writes the checkpoint (mpirun aborts the job when one rank exits non-zero).
void on_root(const std::function<void()>& f);
// Rank 0's file `path`, read there and sent to every rank: a checkpoint to resume.
SafeTensors read_checkpoint_on_root(const std::string& path);
// --micro-batches: 1 when not given, or the process count under mpirun; refuses a count the
// ranks or the batch size do not divide (check_micro_batches, a UsageError).
void resolve_micro_batches(TrainOptions& opt);
// Every rank runs the same build with the same options (every row of the option table) and the
// same settings that change the numbers or the exchange (TAPEGRAD_BUCKET_MB, TAPEGRAD_ISA's
// kernel path, the GEMM's KC from TAPEGRAD_GEMM_BLOCKING or the caches): else, on every rank, a
// UsageError naming the first option that differs, or a TrainError naming the setting and the
// ranks. A malformed setting (those and TAPEGRAD_THREADS) on any rank is a TrainError naming the
// first such rank, on every rank; in one process, without a rank.
void check_same_options(const TrainOptions& opt);
// The CPUs one rank may use as its launcher left them: how many its affinity mask allows, and
// which machine and which mask they are (ranks of one machine with one mask share those CPUs).
struct CpuShare {
  uint64_t host = 0, mask = 0;  // hashes of the host name and of the affinity mask
  int64_t cpus = 1;
};
// Threads for rank `me`: its CPUs divided among the ranks of its machine with the same mask, at
// least 1. mpirun binds each rank to a core of its own by default (up to two ranks a machine):
// 1 thread each; with --bind-to none every rank sees every core: cores / ranks there.
int threads_for(const std::vector<CpuShare>& ranks, int me);
// This rank's --threads when none is given: threads_for over every rank's CpuShare (a collective
// under mpirun). A single process gets its affinity mask's count (taskset -c 0: 1 thread).
int default_threads();
}  // namespace tg::train
