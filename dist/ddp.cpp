// DistributedDataParallel and DistributedSampler (see ddp.h).
#include "dist/ddp.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/rng.h"
#include "dist/dist.h"

namespace tg::dist {

DistributedDataParallel::DistributedDataParallel(nn::Module& module)
    : module_(module), params_(module.parameters()), layout_(params_, size()) {
  flat_.resize(size_t(layout_.numel()));
  for (Tensor& p : params_)  // rank 0's initialisation everywhere
    broadcast(p.data<float>(), size_t(p.numel()) * sizeof(float));
}

void DistributedDataParallel::reduce_gradients() {
  const auto named = module_.named_parameters();
  layout_.for_range(0, layout_.numel(), [&](size_t k, int64_t, int64_t at, int64_t n) {
    const Tensor g = params_[k].grad();
    if (!g.defined())
      throw std::logic_error("DistributedDataParallel: parameter '" + named[k].first +
                             "' has no gradient (call reduce_gradients after backward)");
    std::memcpy(flat_.data() + at, g.contiguous().data<float>(), size_t(n) * sizeof(float));
  });
  // Each rank sums its shard of the N gradients in rank order, then all gather the shards.
  const int ranks = size(), me = rank();
  const int64_t lo = layout_.begin(me), n = layout_.end(me) - lo;
  std::vector<float> recv(size_t(n) * size_t(ranks));
  std::vector<size_t> recv_bytes(size_t(ranks), size_t(n) * sizeof(float)), recv_offsets;
  std::vector<const float*> parts;
  for (int r = 0; r < ranks; ++r) {
    recv_offsets.push_back(size_t(r) * size_t(n) * sizeof(float));
    parts.push_back(recv.data() + size_t(r) * size_t(n));
  }
  const ShardBytes shards(layout_, sizeof(float));
  exchange(flat_.data(), shards.bytes, shards.offsets, recv.data(), recv_bytes, recv_offsets);
  float* mine = flat_.data() + lo;
  sum_in_order(parts, mine, n);
  for (int64_t i = 0; i < n; ++i) mine[i] /= float(ranks);
  gather_all(mine, flat_.data(), shards.bytes, shards.offsets);
  layout_.for_range(0, layout_.numel(), [&](size_t k, int64_t, int64_t at, int64_t n) {
    std::memcpy(params_[k].grad().data<float>(), flat_.data() + at, size_t(n) * sizeof(float));
  });
}

double mean_over_ranks(double v) {
  const int ranks = size();
  std::vector<double> all(static_cast<size_t>(ranks));
  gather_all_equal(&v, all.data(), sizeof v);
  double sum = 0;
  for (const double x : all) sum += x;
  return sum / double(ranks);
}

DistributedSampler::DistributedSampler(int64_t size, bool shuffle, uint64_t seed, bool drop_last,
                                       int num_replicas, int rank)
    : size_(size),
      shuffle_(shuffle),
      drop_last_(drop_last),
      seed_(seed),
      replicas_(num_replicas < 0 ? dist::size() : num_replicas),
      rank_(rank < 0 ? dist::rank() : rank) {
  if (size < 0) throw std::invalid_argument("DistributedSampler: negative dataset size");
  if (replicas_ < 1 || rank_ >= replicas_)
    throw std::invalid_argument("DistributedSampler: invalid rank " + std::to_string(rank_) +
                                ", rank should be in the interval [0, " +
                                std::to_string(replicas_ - 1) + "]");
  // len(dataset) % num_replicas != 0 with drop_last: the tail is dropped.
  num_samples_ = drop_last_ && size_ % replicas_ != 0
                     ? std::max<int64_t>(0, (size_ - replicas_ + replicas_ - 1) / replicas_)
                     : (size_ + replicas_ - 1) / replicas_;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (shuffle_) {
    Generator g(seed_ + uint64_t(epoch_));
    order = g.randperm(size_);
  } else {
    for (int64_t i = 0; i < size_; ++i) order.push_back(i);
  }
  const int64_t total = num_samples_ * replicas_;
  if (!drop_last_) {
    for (size_t i = 0; int64_t(order.size()) < total && size_ > 0; ++i) order.push_back(order[i]);
  }
  order.resize(size_t(total));
  std::vector<int64_t> mine;
  for (int64_t i = rank_; i < total; i += replicas_) mine.push_back(order[size_t(i)]);
  return mine;
}

}  // namespace tg::dist
