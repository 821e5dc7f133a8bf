// torch.distributed in the small, for a user's own training loop under mpirun (a build with
// Open MPI; one process otherwise): dist::init() (init_process_group), DistributedDataParallel
// (rank 0's weights everywhere, gradients averaged over ranks after backward) and
// DistributedSampler (each rank's indices of an epoch, as PyTorch's). examples/ddp_regression.cpp
// is a whole program:
//
//   dist::init();
//   DistributedDataParallel ddp(model);              // broadcasts rank 0's parameters
//   DistributedSampler sampler(n, /*shuffle=*/true);
//   for (epoch...) { sampler.set_epoch(epoch);
//     for (batch of sampler.indices()) { loss.backward(); ddp.reduce_gradients(); opt.step(); } }
//
// The average is summed in rank order by sum_in_order() (data_parallel.h), never by MPI's
// reduction, so it is the same on every rank and for every MPI algorithm.
//
// Not here: overlapping the reduction with backward (the `tapegrad train` path does,
// bucket_exchange.h), unused parameters, process groups other than the world, buffers.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "dist/flat_layout.h"
#include "nn/module.h"

namespace tg::dist {

class DistributedDataParallel {
 public:
  // Copies rank 0's parameters into every rank's module (as DDP's constructor does), once the
  // ranks have compared their parameter lists: names, dtypes and shapes in order must agree, else
  // every rank throws std::invalid_argument naming the first difference ("rank 1's parameter 0
  // is 'weight' torch.float32 [2, 3], rank 0's is 'weight' torch.float32 [3, 2]"). A process
  // started by a launcher as one of several whose dist::init() has not run throws
  // std::logic_error (it would train alone as rank 0 of 1).
  explicit DistributedDataParallel(nn::Module& module);
  nn::Module& module() { return module_; }
  Tensor forward(const Tensor& x) { return module_.forward(x); }

  // After loss.backward() on every rank: each parameter's .grad() becomes the mean of the
  // ranks' gradients, (g_0 + g_1 + ... + g_{N-1}) / N in that order, on every rank. A parameter
  // without a gradient on any rank makes every rank throw std::logic_error naming the first
  // such rank and parameter (no rank is left waiting for the others).
  void reduce_gradients();

 private:
  void check_gradients() const;
  nn::Module& module_;
  std::vector<Tensor> params_;
  FlatLayout layout_;
  std::vector<float> flat_;
};

// The mean of one number over the ranks, added in rank order (a loss to print).
double mean_over_ranks(double v);

// torch.utils.data.DistributedSampler: an epoch's indices of a dataset of `size` examples
// (randperm on a Generator seeded with seed + epoch when shuffling), padded by repeating its
// start to a multiple of the ranks (or cut, with drop_last), and rank r's every N-th from r.
class DistributedSampler {
 public:
  DistributedSampler(int64_t size, bool shuffle = true, uint64_t seed = 0, bool drop_last = false,
                     int num_replicas = -1, int rank = -1);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  std::vector<int64_t> indices() const;
  int64_t num_samples() const { return num_samples_; }  // len(sampler)

 private:
  int64_t size_, num_samples_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  int replicas_, rank_;
  int64_t epoch_ = 0;
};

}  // namespace tg::dist
