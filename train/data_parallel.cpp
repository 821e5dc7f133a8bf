// Micro-batches, ranks and ZeRO-1 with the single process's bits (see data_parallel.h).
#include "train/data_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "core/autograd.h"
#include "core/ops.h"
#include "dist/bucket_exchange.h"
#include "dist/dist.h"

namespace tg::train {

namespace {

float* grad_data(const Tensor& p) {
  Tensor g = p.grad();
  if (!g.defined() || !g.is_contiguous() || g.dtype() != DType::Float32)
    throw std::logic_error("DataParallelStep: a parameter has no contiguous float32 gradient");
  return g.data<float>();
}

}  // namespace

void check_micro_batches(int64_t k, int ranks, int64_t batch_size, const std::string& k_from,
                         bool k_given) {
  const std::string n = std::to_string(ranks);
  if (k < 1 || k % ranks != 0)
    throw UsageError("--micro-batches " + std::to_string(k) + k_from + " does not split among " +
                     n + " processes; give a multiple of " + n);
  if (batch_size == 0 || batch_size % k == 0) return;
  const std::string b = "--batch-size " + std::to_string(batch_size);
  if (k_given || k == 1)
    throw UsageError(b + " does not split into " + std::to_string(k) + " micro-batches");
  throw UsageError(b + " does not split among " + n + " processes; give a multiple of " + n);
}

double parse_bucket_mb(const char* text) {
  const std::optional<double> v = cli::parse_real(text);
  if (!v || !(*v >= 0 && *v <= kMaxBucketMB))
    throw std::invalid_argument(std::string("TAPEGRAD_BUCKET_MB='") + text +
                                "' is not a bucket size: use a number of MiB from 0 (no overlap) "
                                "to " +
                                std::to_string(int(kMaxBucketMB)));
  return *v;
}

double bucket_mb_from_env() {
  const char* s = std::getenv("TAPEGRAD_BUCKET_MB");
  return s == nullptr || *s == '\0' ? kDefaultBucketMB : parse_bucket_mb(s);
}

// ---- the step --------------------------------------------------------------------------------

DataParallelStep::DataParallelStep(nn::GPTModel& model, int64_t micro_batches, bool full_gradient)
    : params_(model.parameters()),
      K_(micro_batches),
      rank_(dist::rank()),
      ranks_(dist::size()),
      full_gradient_(full_gradient),
      layout_(params_, dist::size()) {
  check_micro_batches(K_, ranks_);
  per_rank_ = K_ / ranks_;
  acc_.resize(size_t(layout_.numel()));
  // Several micro-batches on each of several ranks: their gradients kept apart (K/N flat
  // gradients), as the K parts must be summed in micro-batch order across the ranks.
  if (ranks_ > 1 && per_rank_ > 1) parts_.resize(size_t(per_rank_ * layout_.numel()));
  // One micro-batch per rank: its backward produces the gradients the ranks exchange, so they
  // can leave while it runs. TAPEGRAD_BUCKET_MB sets DDP's bucket_cap_mb (25; 0: no overlap).
  const double bucket_mb = ranks_ > 1 ? bucket_mb_from_env() : 0;
  if (ranks_ > 1 && per_rank_ == 1 && bucket_mb > 0)
    exchange_ = std::make_unique<dist::BucketExchange>(params_, layout_, acc_.data(),
                                                       size_t(bucket_mb * 1024 * 1024));
}

DataParallelStep::~DataParallelStep() = default;

// Micro-batch k's loss (the mean over its windows); its gradient, scaled by 1/K, in .grad().
double DataParallelStep::micro_batch(const data::Batch& batch, int64_t k, nn::GPTModel& model) {
  const int64_t b = batch.batch_size / K_, T = batch.max_length;
  const auto rows = [&](const std::vector<int64_t>& v) {
    return from_vector(std::vector<int64_t>(v.begin() + k * b * T, v.begin() + (k + 1) * b * T),
                       {b, T});
  };
  const Tensor loss = calc_loss_batch(rows(batch.inputs), rows(batch.targets), model);
  const double value = loss.item<double>();
  (loss * (1.0 / double(K_))).backward();
  return value;
}

// The generator words one micro-batch's forward draws (its dropout masks): the same for every
// micro-batch, as they have one shape. Measured once on a forward without gradients, from a copy
// of the generator's state that is then put back.
uint64_t DataParallelStep::words_per_micro_batch(const data::Batch& batch, nn::GPTModel& model) {
  if (draws_ >= 0) return uint64_t(draws_);
  Generator& gen = default_generator();
  const Generator saved = gen;
  const int64_t b = batch.batch_size / K_, T = batch.max_length;
  {
    NoGradGuard no_grad;
    model(from_vector(std::vector<int64_t>(batch.inputs.begin(), batch.inputs.begin() + b * T),
                      {b, T}));
  }
  draws_ = int64_t(gen.words_drawn() - saved.words_drawn());
  gen = saved;
  return uint64_t(draws_);
}

// This process's micro-batch gradient into acc_: copied for the first, summed for the others.
void DataParallelStep::fold_gradient(bool first) {
  layout_.for_range(0, layout_.numel(), [&](size_t k, int64_t, int64_t flat, int64_t n) {
    const float* g = grad_data(params_[k]);
    float* a = acc_.data() + flat;
    if (first) {
      std::memcpy(a, g, size_t(n) * sizeof(float));
    } else {
      const float* parts[] = {a, g};
      dist::sum_in_order(parts, a, n);
    }
  });
}

void DataParallelStep::write_gradient(int64_t lo, int64_t hi, const float* flat) {
  layout_.for_range(lo, hi, [&](size_t k, int64_t in_param, int64_t at, int64_t n) {
    std::memcpy(grad_data(params_[k]) + in_param, flat + (at - lo), size_t(n) * sizeof(float));
  });
}

double DataParallelStep::loss_and_backward(const data::Batch& batch, nn::GPTModel& model) {
  check_micro_batches(K_, ranks_, batch.batch_size);
  Generator& gen = default_generator();
  const Generator start = gen;
  const int64_t first = rank_ * per_rank_;
  if (ranks_ > 1) gen.discard(uint64_t(first) * words_per_micro_batch(batch, model));
  std::vector<double> losses(size_t(K_), 0.0);
  if (exchange_) {  // buckets leave while backward runs
    exchange_->start();
    losses[size_t(first)] = micro_batch(batch, first, model);
    exchange_->finish();
  }
  for (int64_t j = 0; !exchange_ && j < per_rank_; ++j) {
    if (j > 0) model.zero_grad();
    losses[size_t(first + j)] = micro_batch(batch, first + j, model);
    if (ranks_ > 1 && per_rank_ > 1)
      keep_gradient(j);
    else
      fold_gradient(j == 0);
  }
  if (ranks_ > 1) {  // where the single process's K forwards leave the generator
    gen = start;
    gen.discard(uint64_t(K_) * uint64_t(draws_));
    dist::gather_all_equal(losses.data() + first, losses.data(),
                           size_t(per_rank_) * sizeof(double));
    if (!exchange_) reduce_across_ranks();
    finish_reduction();
  } else {
    write_gradient(0, layout_.numel(), acc_.data());
  }
  double total = 0;
  for (const double l : losses) total += l;
  return total / double(K_);
}

// This rank's micro-batch j (of K/N) into parts_, kept apart from the others: shard s of part j
// at K/N * begin(s) + j * size(s), so the K/N parts of shard s are one block for rank s.
void DataParallelStep::keep_gradient(int64_t j) {
  for (int s = 0; s < ranks_; ++s) {
    const int64_t lo = layout_.begin(s), len = layout_.end(s) - lo;
    float* to = parts_.data() + per_rank_ * lo + j * len;
    layout_.for_range(lo, lo + len, [&](size_t k, int64_t in_param, int64_t at, int64_t n) {
      std::memcpy(to + (at - lo), grad_data(params_[k]) + in_param, size_t(n) * sizeof(float));
    });
  }
}

// Rank r receives every rank's partial gradients of its shard, K/N from each: rank q's are
// micro-batches q*K/N .. (q+1)*K/N - 1, so they arrive in micro-batch order and are summed so.
void DataParallelStep::reduce_across_ranks() {
  const int64_t lo = layout_.begin(rank_), n = layout_.end(rank_) - lo;
  const dist::ShardBytes send(layout_, size_t(per_rank_) * sizeof(float));
  const size_t block = size_t(per_rank_) * size_t(n) * sizeof(float);  // from each rank
  std::vector<float> recv(size_t(n) * size_t(K_));
  const std::vector<size_t> recv_bytes(size_t(ranks_), block);
  std::vector<size_t> recv_offsets;
  for (int r = 0; r < ranks_; ++r) recv_offsets.push_back(size_t(r) * block);
  std::vector<const float*> parts;
  for (int64_t m = 0; m < K_; ++m) parts.push_back(recv.data() + m * n);
  dist::exchange(per_rank_ == 1 ? acc_.data() : parts_.data(), send.bytes, send.offsets,
                 recv.data(), recv_bytes, recv_offsets);
  dist::sum_in_order(parts, acc_.data() + lo, n);
}

// This rank's reduced shard, in acc_, into the parameters' .grad(); the whole gradient on every
// rank when clipping needs its norm.
void DataParallelStep::finish_reduction() {
  const int64_t lo = layout_.begin(rank_), hi = layout_.end(rank_);
  write_gradient(lo, hi, acc_.data() + lo);
  if (!full_gradient_) return;
  const dist::ShardBytes shards(layout_, sizeof(float));
  dist::gather_all(acc_.data() + lo, acc_.data(), shards.bytes, shards.offsets);
  write_gradient(0, layout_.numel(), acc_.data());
}

void DataParallelStep::update(AdamW& opt) {
  if (ranks_ == 1) return opt.step();
  NoGradGuard no_grad;
  ++opt.step_count;
  const int64_t lo = layout_.begin(rank_), hi = layout_.end(rank_);
  layout_.for_range(lo, hi, [&](size_t k, int64_t in_param, int64_t at, int64_t n) {
    // AdamW::step's kernel on this rank's piece of the parameter: elementwise, so a piece
    // updates as it would inside the whole.
    adamw_span(n, params_[k].data<float>() + in_param, grad_data(params_[k]) + in_param,
               exp_avg_.data() + (at - lo), exp_avg_sq_.data() + (at - lo),
               {opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, opt.step_count});
  });
  // Every rank's updated shard to every rank.
  layout_.for_range(lo, hi, [&](size_t k, int64_t in_param, int64_t at, int64_t n) {
    std::memcpy(acc_.data() + at, params_[k].data<float>() + in_param, size_t(n) * sizeof(float));
  });
  const dist::ShardBytes shards(layout_, sizeof(float));
  dist::gather_all(acc_.data() + lo, acc_.data(), shards.bytes, shards.offsets);
  layout_.for_range(0, layout_.numel(), [&](size_t k, int64_t in_param, int64_t at, int64_t n) {
    std::memcpy(params_[k].data<float>() + in_param, acc_.data() + at, size_t(n) * sizeof(float));
  });
}

std::string DataParallelStep::summary() const {
  char line[256];
  const double mb = double(moment_bytes()) / (1024.0 * 1024.0);
  if (!exchange_) {
    std::snprintf(line, sizeof line, "data parallel: %d ranks, AdamW state %.1f MiB per rank",
                  ranks_, mb);
    return line;
  }
  const double ex = exchange_->exchange_seconds, wait = exchange_->wait_seconds;
  std::snprintf(line, sizeof line,
                "data parallel: %d ranks, AdamW state %.1f MiB per rank, gradient exchange %.2f s "
                "in %zu buckets, %.0f%% of it hidden behind backward",
                ranks_, mb, ex, exchange_->buckets(),
                ex > 0 ? 100.0 * std::max(0.0, 1 - wait / ex) : 0.0);
  return line;
}

// ---- ZeRO-1 moments --------------------------------------------------------------------------

void DataParallelStep::take_moments(AdamW& opt) {
  if (ranks_ == 1) return;
  const int64_t lo = layout_.begin(rank_), hi = layout_.end(rank_);
  exp_avg_.assign(size_t(hi - lo), 0.0f);
  exp_avg_sq_.assign(size_t(hi - lo), 0.0f);
  layout_.for_range(lo, hi, [&](size_t k, int64_t in_param, int64_t at, int64_t n) {
    std::memcpy(exp_avg_.data() + (at - lo), opt.exp_avg[k].data<float>() + in_param,
                size_t(n) * sizeof(float));
    std::memcpy(exp_avg_sq_.data() + (at - lo), opt.exp_avg_sq[k].data<float>() + in_param,
                size_t(n) * sizeof(float));
  });
  release_moments(opt);
}

void DataParallelStep::release_moments(AdamW& opt) const {
  if (ranks_ == 1) return;  // one process keeps AdamW whole
  for (Tensor& t : opt.exp_avg) t = Tensor();
  for (Tensor& t : opt.exp_avg_sq) t = Tensor();
}

// Parameter by parameter, straight into rank 0's whole tensors: no flat copy of the moments.
void DataParallelStep::gather_moments(AdamW& opt) {
  if (ranks_ == 1) return;
  const int64_t lo = layout_.begin(rank_);
  for (size_t k = 0; k < params_.size(); ++k) {
    std::vector<size_t> bytes, offsets;  // each rank's piece of parameter k
    int64_t mine_at = 0;                 // this rank's piece: its flat start (if any)
    for (int r = 0; r < ranks_; ++r) {
      int64_t n = 0, in_param = 0;
      layout_.for_range(layout_.begin(r), layout_.end(r),
                        [&](size_t i, int64_t p, int64_t at, int64_t c) {
                          if (i != k) return;
                          n = c, in_param = p;
                          if (r == rank_) mine_at = at;
                        });
      bytes.push_back(size_t(n) * sizeof(float));
      offsets.push_back(size_t(in_param) * sizeof(float));
    }
    for (const bool second : {false, true}) {
      Tensor& whole = (second ? opt.exp_avg_sq : opt.exp_avg)[k];
      if (rank_ == 0) whole = zeros(params_[k].shape());
      const std::vector<float>& mine = second ? exp_avg_sq_ : exp_avg_;
      const float* piece = bytes[size_t(rank_)] > 0 ? mine.data() + (mine_at - lo) : mine.data();
      dist::gather(piece, rank_ == 0 ? whole.data<float>() : nullptr, bytes, offsets);
    }
  }
}

}  // namespace tg::train
