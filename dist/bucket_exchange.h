// Overlapping the gradient exchange with backward, as PyTorch DDP's reducer does: parameters
// are grouped into buckets of about 25 MB in reverse order (the order backward produces their
// gradients), and a bucket leaves as soon as backward has written its last gradient. Open MPI
// has no progress thread of its own, so a communication thread of ours makes the MPI calls
// (MPI_THREAD_SERIALIZED: the training thread makes none while a step's buckets travel).
//
// The result is the unbucketed exchange's to the bit: each element of this rank's shard still
// gets its N partial gradients summed by sum_in_order() in rank order; only the moment changes.
//
// Not here: gradients of a parameter arriving twice in one backward (a tied weight is refused),
// unused parameters (DDP's find_unused_parameters), bucket re-ordering after the first step.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "dist/flat_layout.h"

namespace tg::dist {

class BucketExchange {
 public:
  // acc: the flat gradient (layout.numel() floats) the buckets are copied into and this rank's
  // reduced shard comes back in. bucket_bytes: DDP's bucket_cap_mb.
  BucketExchange(const std::vector<Tensor>& params, const FlatLayout& layout, float* acc,
                 size_t bucket_bytes);
  ~BucketExchange();
  BucketExchange(const BucketExchange&) = delete;
  BucketExchange& operator=(const BucketExchange&) = delete;

  // Arms the leaf-gradient hook (core/autograd.h) on this thread for one backward.
  void start();
  // After that backward: waits for the last bucket. acc[begin(rank), end(rank)) then holds this
  // rank's reduced shard.
  void finish();

  size_t buckets() const { return buckets_.size(); }
  // Totals over the steps so far: the communication thread's time in exchanges and sums, and
  // the training thread's wait for it after backward (the part not hidden).
  double exchange_seconds = 0, wait_seconds = 0;

 private:
  struct Bucket {
    int64_t lo, hi;  // flat range
    int pending;     // parameters whose gradient has not arrived this step
    int params;
  };
  void on_gradient(const TensorImpl& leaf);
  void run();  // the communication thread
  void exchange(const Bucket& b);

  const std::vector<Tensor>& params_;
  const FlatLayout& layout_;
  float* acc_;
  int rank_, ranks_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // per parameter
  std::unordered_map<const TensorImpl*, size_t> index_;
  int64_t piece_ = 0;        // the largest piece of this rank's shard in one bucket
  std::vector<float> recv_;  // N partial gradients of one such piece

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t step_ = 0, done_step_ = 0;  // steps started, steps whose buckets all went
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace tg::dist
