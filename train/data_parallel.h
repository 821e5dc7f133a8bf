// Gradient accumulation and data parallelism with one result whatever the process count.
//
// A step's global batch of B windows is cut into K micro-batches of B/K (--micro-batches K, or K
// processes under mpirun: one micro-batch each, or K/N each on N ranks). Micro-batch k's loss is
// cross_entropy's mean over its windows times 1/K, so the K gradients add up to the gradient of
// the mean over the global batch, as the book's single batch has it. Three things make N
// processes give the single process's bits:
//   - the sum of the K partial gradients is one function, sum_in_order(), in micro-batch order,
//     whether the parts come from one process's loop or from the ranks (never MPI's reduction);
//   - micro-batch k draws its dropout masks where the single process's k-th forward would: rank
//     r skips the generator ahead by the words the micro-batches before it draw (counted once);
//   - evaluation splits whole batches across ranks and adds their losses in batch order.
// ZeRO-1: each rank keeps AdamW's moments for its 1/N of the flat parameter vector only, updates
// that shard, and all ranks then gather the parameters; a checkpoint gathers the moments, so it
// does not depend on N.
//
// Not here: tensor or pipeline parallelism, ZeRO-2/3 (gradients and weights stay whole on every
// rank), uneven micro-batches.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/gpt_dataset.h"
#include "nn/gpt.h"
#include "train/optim.h"
#include "train/safetensors.h"
#include "train/trainer.h"

namespace tg::train {

class BucketExchange;

// THE reduction of partial gradients: out[i] = ((parts[0][i] + parts[1][i]) + parts[2][i]) + ...
// for i < n, the parts in the order given. `out` may be parts[0].
void sum_in_order(std::span<const float* const> parts, float* out, int64_t n);

// Parameters laid end to end in named_parameters() order (the flat vector), cut into `parts`
// contiguous shards: shard r is [n*r/parts, n*(r+1)/parts).
class FlatLayout {
 public:
  FlatLayout(const std::vector<Tensor>& params, int parts);
  int64_t numel() const { return numel_; }
  int64_t begin(int r) const { return numel_ * r / parts_; }
  int64_t end(int r) const { return numel_ * (r + 1) / parts_; }
  // Calls f(param index, offset in the parameter, offset in the flat vector, count) for every
  // piece of a parameter inside [lo, hi).
  void for_range(int64_t lo, int64_t hi,
                 const std::function<void(size_t, int64_t, int64_t, int64_t)>& f) const;

 private:
  std::vector<int64_t> offsets_;  // flat start of each parameter, and numel at the end
  int64_t numel_ = 0;
  int parts_ = 1;
};

// One training step beyond the book's single batch: K micro-batches in one process, or the
// ranks of an MPI world (dist.h) sharing them. Plugs into train_model_simple (TrainLoop::runner).
class DataParallelStep final : public StepRunner {
 public:
  // micro_batches: K (a multiple of the world size); full_gradient: every rank needs the whole
  // reduced gradient after the step's backward (gradient clipping reads its norm).
  DataParallelStep(nn::GPTModel& model, int64_t micro_batches, bool full_gradient);
  ~DataParallelStep() override;

  double loss_and_backward(const data::Batch& batch, nn::GPTModel& model) override;
  void update(AdamW& optimizer) override;

  // ZeRO-1 across ranks: keep this rank's shard of `optimizer`'s moments and free the rest.
  void take_moments(AdamW& optimizer);
  // The whole moments back into `optimizer` on rank 0 (for a checkpoint); a collective.
  void gather_moments(AdamW& optimizer);
  // Frees gather_moments()'s copy again.
  void release_moments(AdamW& optimizer) const;
  // Bytes of AdamW state this rank keeps.
  int64_t moment_bytes() const { return int64_t(exp_avg_.size() * 2 * sizeof(float)); }
  // The gradient exchange's overlap with backward so far (bucket_exchange.h); null when the
  // exchange runs after backward (one process, several micro-batches per rank, or
  // TAPEGRAD_BUCKET_MB=0).
  const BucketExchange* overlap() const { return exchange_.get(); }
  // One line for the end of a run on several ranks: AdamW state per rank, the gradient
  // exchange's time and how much of it backward hid.
  std::string summary() const;

 private:
  double micro_batch(const data::Batch& batch, int64_t k, nn::GPTModel& model);
  void fold_gradient(bool first);
  void reduce_across_ranks();
  void finish_reduction();
  void write_gradient(int64_t lo, int64_t hi, const float* flat);
  uint64_t words_per_micro_batch(const data::Batch& batch, nn::GPTModel& model);

  std::vector<Tensor> params_;
  int64_t K_, per_rank_;
  int rank_, ranks_;
  bool full_gradient_;
  FlatLayout layout_;
  std::vector<float> acc_;                   // this process's summed micro-batch gradients (flat)
  std::vector<float> exp_avg_, exp_avg_sq_;  // ZeRO-1: moments of this rank's shard only
  int64_t draws_ = -1;                       // generator words one micro-batch's forward draws
  std::unique_ptr<BucketExchange> exchange_;
};

// Rank 0 runs f; when it throws, every rank throws the same error (a TrainError or UsageError
// with its message), so no rank waits for a broadcast that will not come. No rank returns before
// rank 0's f has ended (its outcome is broadcast): after a stop, no rank exits while rank 0 still
// writes the checkpoint (mpirun aborts the job when one rank exits non-zero).
void on_root(const std::function<void()>& f);
// Rank 0's file `path`, read there and sent to every rank: a checkpoint to resume.
SafeTensors read_checkpoint_on_root(const std::string& path);
// --micro-batches: 1 when not given, or the process count under mpirun; refuses a count the
// ranks or the batch size do not divide (UsageError).
void resolve_micro_batches(TrainOptions& opt);
// Every rank runs the same build with the same options, else a UsageError naming the first
// option that differs (on every rank). A no-op for one process.
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
// Rank 0's token ids in every rank's `ids`.
void broadcast_ids(std::vector<int64_t>& ids);
// Each rank's contiguous share of `losses` (rank r: [n*r/N, n*(r+1)/N)) to every rank.
void share_batch_losses(std::vector<double>& losses);

}  // namespace tg::train
