// Buckets of gradients sent while backward runs (see bucket_exchange.h).
#include "dist/bucket_exchange.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "core/autograd.h"
#include "dist/dist.h"

namespace tg::dist {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

BucketExchange::BucketExchange(const std::vector<Tensor>& params, const FlatLayout& layout,
                               float* acc, size_t bucket_bytes)
    : params_(params),
      layout_(layout),
      acc_(acc),
      rank_(rank()),
      ranks_(size()),
      bucket_of_(params.size()) {
  // Last parameter first, as backward produces them: each bucket is a contiguous flat range
  // that grows downwards until it holds bucket_bytes.
  for (size_t k = params.size(); k-- > 0;) {
    layout_.for_range(0, layout_.numel(), [&](size_t i, int64_t, int64_t at, int64_t n) {
      if (i != k) return;
      if (buckets_.empty() ||
          size_t(buckets_.back().hi - buckets_.back().lo) * sizeof(float) >= bucket_bytes)
        buckets_.push_back({at, at + n, 0, 0});
      buckets_.back().lo = at;
      ++buckets_.back().params;
    });
    bucket_of_[k] = buckets_.size() - 1;
    index_[params[k].impl()] = k;
  }
  // Room for the N partial gradients of the largest piece of this rank's shard in one bucket.
  for (const Bucket& b : buckets_) {
    const int64_t piece = std::min(b.hi, layout_.end(rank_)) - std::max(b.lo, layout_.begin(rank_));
    piece_ = std::max(piece_, piece);
  }
  recv_.resize(size_t(piece_) * size_t(ranks_));
  thread_ = std::thread([this] { run(); });
}

BucketExchange::~BucketExchange() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BucketExchange::start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Bucket& b : buckets_) b.pending = b.params;
    ++step_;
  }
  cv_.notify_all();
  set_leaf_grad_hook([this](const TensorImpl& leaf) { on_gradient(leaf); });
}

// On the training thread, inside backward: the parameter's gradient into the flat vector; the
// bucket's last one lets the communication thread send it.
void BucketExchange::on_gradient(const TensorImpl& leaf) {
  const auto it = index_.find(&leaf);
  if (it == index_.end()) return;  // not one of the model's parameters
  const size_t k = it->second;
  const Tensor g = params_[k].grad();
  layout_.for_range(0, layout_.numel(), [&](size_t i, int64_t, int64_t at, int64_t n) {
    if (i == k) std::memcpy(acc_ + at, g.contiguous().data<float>(), size_t(n) * sizeof(float));
  });
  bool ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Bucket& b = buckets_[bucket_of_[k]];
    if (b.pending == 0)
      throw std::logic_error("BucketExchange: a parameter got two gradients in one backward");
    ready = --b.pending == 0;
  }
  if (ready) cv_.notify_all();
}

void BucketExchange::finish() {
  set_leaf_grad_hook(nullptr);
  const Clock::time_point t = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  for (const Bucket& b : buckets_)
    if (b.pending != 0)  // the others would wait for this rank for ever
      abort_all(70);
  cv_.wait(lock, [&] { return done_step_ == step_; });
  wait_seconds += since(t);
}

void BucketExchange::run() {
  uint64_t step = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return quit_ || step_ > step; });
    if (quit_) return;
    ++step;
    for (const Bucket& b : buckets_) {
      cv_.wait(lock, [&] { return quit_ || b.pending == 0; });
      if (quit_) return;
      lock.unlock();
      const Clock::time_point t = Clock::now();
      exchange(b);
      exchange_seconds += since(t);
      lock.lock();
    }
    done_step_ = step;
    lock.unlock();
    cv_.notify_all();
  }
}

// Block j of the bucket goes to rank j (the part inside its shard); this rank's part comes back
// from every rank and is summed in rank order, element by element as the unbucketed exchange.
void BucketExchange::exchange(const Bucket& b) {
  const int64_t lo = std::max(b.lo, layout_.begin(rank_));
  const int64_t m = std::max<int64_t>(0, std::min(b.hi, layout_.end(rank_)) - lo);
  std::vector<size_t> send_bytes, send_offsets, recv_bytes, recv_offsets;
  for (int r = 0; r < ranks_; ++r) {
    const int64_t a = std::max(b.lo, layout_.begin(r)), e = std::min(b.hi, layout_.end(r));
    send_bytes.push_back(size_t(std::max<int64_t>(0, e - a)) * sizeof(float));
    send_offsets.push_back(size_t(std::min(a, b.hi)) * sizeof(float));
    recv_bytes.push_back(size_t(m) * sizeof(float));
    recv_offsets.push_back(size_t(r) * size_t(piece_) * sizeof(float));
  }
  dist::exchange(acc_, send_bytes, send_offsets, recv_.data(), recv_bytes, recv_offsets);
  if (m == 0) return;
  std::vector<const float*> parts;
  for (int r = 0; r < ranks_; ++r) parts.push_back(recv_.data() + size_t(r) * size_t(piece_));
  sum_in_order(parts, acc_ + lo, m);
}

}  // namespace tg::dist
