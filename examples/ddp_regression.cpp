// Data parallelism in a program of your own (dist/ddp.h): a straight line y = 3x - 2 fitted
// by nn::Linear(1, 1) with AdamW, each rank taking its share of every epoch from a
// DistributedSampler and averaging gradients with DistributedDataParallel before each step.
// Rank 0 prints; every rank ends with the same weights.
//
//   mpirun -np 2 build/release/examples/ddp_regression     (as root add --allow-run-as-root)
// It runs as one process too. With tapegrad installed (make install PREFIX=...):
//   c++ -std=c++20 ddp_regression.cpp $(pkg-config --cflags --libs tapegrad)
#include <cstdio>
#include <vector>

#include "core/ops.h"
#include "core/rng.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "nn/linear.h"
#include "train/optim.h"

using namespace tg;

int main() {
  dist::init();  // torch.distributed.init_process_group: the ranks mpirun started, or just us
  std::vector<float> xs, ys;  // 64 points on the line, x in [-1, 1)
  for (int i = 0; i < 64; ++i) {
    xs.push_back(float(i - 32) / 32.0f);
    ys.push_back(3.0f * xs.back() - 2.0f);
  }
  manual_seed(123);  // each rank draws its own weights; DDP replaces them with rank 0's
  nn::Linear model(1, 1);
  dist::DistributedDataParallel ddp(model);
  train::AdamW optimizer(model, /*lr=*/0.1, /*weight_decay=*/0.0);
  dist::DistributedSampler sampler(int64_t(xs.size()), /*shuffle=*/true, /*seed=*/0);
  const int64_t per_rank_batch = 8 / dist::size();  // a global batch of 8
  for (int64_t epoch = 0; epoch < 30; ++epoch) {
    sampler.set_epoch(epoch);  // another shuffle each epoch, the same on every rank
    const std::vector<int64_t> mine = sampler.indices();
    double epoch_loss = 0;
    int64_t steps = 0;
    for (size_t at = 0; at + size_t(per_rank_batch) <= mine.size(); at += size_t(per_rank_batch)) {
      std::vector<float> x, y;
      for (int64_t i = 0; i < per_rank_batch; ++i) {
        x.push_back(xs[size_t(mine[at + size_t(i)])]);
        y.push_back(ys[size_t(mine[at + size_t(i)])]);
      }
      optimizer.zero_grad();
      const Tensor diff =
          ddp.forward(from_vector(x, {per_rank_batch, 1})) - from_vector(y, {per_rank_batch, 1});
      const Tensor loss = mean(diff * diff);
      loss.backward();
      ddp.reduce_gradients();  // every rank: the mean of all ranks' gradients
      optimizer.step();
      epoch_loss += loss.item<double>();
      ++steps;
    }
    const double avg = dist::mean_over_ranks(epoch_loss / double(steps));
    if (dist::is_root() && (epoch + 1) % 10 == 0)
      std::printf("epoch %lld: loss %.6f\n", static_cast<long long>(epoch + 1), avg);
  }
  const double w = model.weight.item<double>(), b = model.bias.item<double>();
  // The same weights everywhere: their bits, averaged over ranks, are each rank's own.
  const bool same = dist::mean_over_ranks(w) == w && dist::mean_over_ranks(b) == b;
  if (dist::is_root())
    std::printf("%d rank(s): w = %.3f, b = %.3f, weights identical on every rank: %s\n",
                dist::size(), w, b, same ? "yes" : "no");
  return 0;
}
