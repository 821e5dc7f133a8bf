// Gradient accumulation and data parallelism with one result whatever the process count.
//
// A step's global batch of B windows is cut into K micro-batches of B/K (--micro-batches K, or K
// processes under mpirun: one micro-batch each, or K/N each on N ranks). Micro-batch k's loss is
// cross_entropy's mean over its windows times 1/K, so the K gradients add up to the gradient of
// the mean over the global batch, as the book's single batch has it. Three things make N
// processes give the single process's bits:
//   - the sum of the K partial gradients is one function, sum_in_order(), in micro-batch order,
//     whether the parts come from one process's loop or from the ranks (never MPI's reduction),
//     also when a rank runs several: its K/N gradients travel apart, not pre-summed;
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
#include "dist/flat_layout.h"
#include "nn/gpt.h"
#include "train/optim.h"
#include "train/trainer.h"

namespace tg::dist {
class BucketExchange;
}

namespace tg::train {

// THE check of a micro-batch count K against the ranks N and the batch B (0: not known yet):
// K >= 1 a multiple of N, B a multiple of K; else a UsageError naming the flags. k_from follows
// K in the message (" (the checkpoint's)"); k_given: --micro-batches was given (else K is N's
// default, and the batch is said not to split among the processes).
void check_micro_batches(int64_t k, int ranks, int64_t batch_size = 0,
                         const std::string& k_from = "", bool k_given = true);

// TAPEGRAD_BUCKET_MB, DDP's bucket_cap_mb: MiB of gradients per bucket sent while backward runs,
// 0 for none (the exchange after backward). A number from 0 to kMaxBucketMB, parsed whole;
// else std::invalid_argument quoting it. Unset or empty: kDefaultBucketMB.
inline constexpr double kDefaultBucketMB = 25, kMaxBucketMB = 4096;
double parse_bucket_mb(const char* text);
double bucket_mb_from_env();

// One training step beyond the book's single batch: K micro-batches in one process, or the
// ranks of an MPI world (dist.h) sharing them. Plugs into train_model_simple (TrainLoop::runner).
class DataParallelStep final : public StepRunner {
 public:
  // micro_batches: K (a multiple of the world size: check_micro_batches); full_gradient: every rank
  // needs the whole reduced gradient after the step's backward (gradient clipping reads its norm).
  // With K/N > 1 on several ranks each rank keeps its K/N micro-batch gradients apart (K/N flat
  // gradients, and K/N more to receive the K parts of its shard), since adding its own first would
  // associate the sum differently from one process's: bits over memory.
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
  const dist::BucketExchange* overlap() const { return exchange_.get(); }
  // One line for the end of a run on several ranks: AdamW state per rank, the gradient
  // exchange's time and how much of it backward hid.
  std::string summary() const;

 private:
  double micro_batch(const data::Batch& batch, int64_t k, nn::GPTModel& model);
  void fold_gradient(bool first);
  void keep_gradient(int64_t j);
  void reduce_across_ranks();
  void finish_reduction();
  void write_gradient(int64_t lo, int64_t hi, const float* flat);
  uint64_t words_per_micro_batch(const data::Batch& batch, nn::GPTModel& model);

  std::vector<Tensor> params_;
  int64_t K_, per_rank_;
  int rank_, ranks_;
  bool full_gradient_;
  dist::FlatLayout layout_;
  std::vector<float> acc_;    // this process's summed micro-batch gradients (flat)
  std::vector<float> parts_;  // K/N > 1 on several ranks: each micro-batch's gradient, by shard
  std::vector<float> exp_avg_, exp_avg_sq_;  // ZeRO-1: moments of this rank's shard only
  int64_t draws_ = -1;                       // generator words one micro-batch's forward draws
  std::unique_ptr<dist::BucketExchange> exchange_;
};

}  // namespace tg::train
