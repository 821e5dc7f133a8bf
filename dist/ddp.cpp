// DistributedDataParallel and DistributedSampler (see ddp.h).
#include "dist/ddp.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/rng.h"
#include "dist/dist.h"

namespace tg::dist {

namespace {

// One line per parameter, as ranks compare them: 'name' dtype shape.
std::vector<std::string> describe(const nn::NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [name, p] : named)
    out.push_back("'" + name + "' " + dtype_name(p.dtype()) + " " + shape_str(p.shape()));
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + '\n';
  return s;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  for (size_t at = 0, nl; (nl = s.find('\n', at)) != std::string::npos; at = nl + 1)
    out.push_back(s.substr(at, nl - at));
  return out;
}

// The first difference between rank r's parameter list and rank 0's, in one line.
std::string first_difference(int r, const std::vector<std::string>& mine,
                             const std::vector<std::string>& root) {
  const std::string who = "rank " + std::to_string(r);
  size_t i = 0;
  while (i < mine.size() && i < root.size() && mine[i] == root[i]) ++i;
  const std::string at = "parameter " + std::to_string(i) + " ";
  if (i < mine.size() && i < root.size())
    return who + "'s " + at + "is " + mine[i] + ", rank 0's is " + root[i];
  if (i < mine.size()) return who + " has " + at + mine[i] + ", rank 0 has none";
  return who + " has no " + at + "(rank 0's is " + root[i] + ")";
}

// The module's parameters, once every rank is known to hold the same list (names, dtypes,
// shapes in order): else every rank throws std::invalid_argument naming the first difference.
// Refuses a process started as one of several whose dist::init() has not run.
std::vector<Tensor> same_parameters_on_every_rank(const nn::Module& module) {
  const Launch l = launch();
  if (size() == 1 && l.needs_mpi())
    throw std::logic_error("DistributedDataParallel: this process is one of " +
                           (l.size > 1 ? std::to_string(l.size) : std::string("several")) +
                           " started by an MPI launcher, but dist::init() has not run (each "
                           "would train alone as rank 0 of 1): call dist::init() first");
  const nn::NamedTensors named = module.named_parameters();
  std::vector<Tensor> params;
  for (const auto& [name, p] : named) params.push_back(p);
  if (size() == 1) return params;
  const std::string mine = joined(describe(named));
  const uint64_t h = std::hash<std::string>{}(mine);
  std::vector<uint64_t> hashes(static_cast<size_t>(size()));
  gather_all_equal(&h, hashes.data(), sizeof h);
  int odd = 0;  // the first rank whose list is not rank 0's
  for (int r = size() - 1; r > 0; --r)
    if (hashes[size_t(r)] != hashes[0]) odd = r;
  if (odd == 0) return params;
  std::string root = mine;
  broadcast(root);
  std::string message =
      rank() == odd ? first_difference(odd, split_lines(mine), split_lines(root)) : "";
  broadcast(message, odd);
  throw std::invalid_argument("DistributedDataParallel: " + message +
                              "; every rank must build the same model");
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& module)
    : module_(module), params_(same_parameters_on_every_rank(module)), layout_(params_, size()) {
  flat_.resize(size_t(layout_.numel()));
  for (Tensor& p : params_)  // rank 0's initialisation everywhere
    broadcast(p.data<float>(), size_t(p.numel()) * sizeof(float));
}

// The first parameter without a gradient, agreed by every rank (reduce_gradients is called by
// all of them): when any rank lacks one, all throw, naming the first such rank, and none is left
// waiting in the exchange.
void DistributedDataParallel::check_gradients() const {
  const auto named = module_.named_parameters();
  std::string missing;
  for (size_t k = 0; k < params_.size() && missing.empty(); ++k)
    if (!params_[k].grad().defined()) missing = named[k].first;
  int first = missing.empty() ? -1 : rank();
  if (size() > 1) {
    std::vector<int> all(static_cast<size_t>(size()));
    gather_all_equal(&first, all.data(), sizeof first);
    first = -1;
    for (int r = size() - 1; r >= 0; --r)
      if (all[size_t(r)] >= 0) first = r;
    if (first >= 0) broadcast(missing, first);
  }
  if (first < 0) return;
  throw std::logic_error("DistributedDataParallel: " +
                         (size() > 1 ? "rank " + std::to_string(first) + ": " : std::string()) +
                         "parameter '" + missing +
                         "' has no gradient (call reduce_gradients after backward)");
}

void DistributedDataParallel::reduce_gradients() {
  check_gradients();
  layout_.for_range(0, layout_.numel(), [&](size_t k, int64_t, int64_t at, int64_t n) {
    const Tensor g = params_[k].grad();
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
