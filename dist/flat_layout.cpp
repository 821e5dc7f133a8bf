// The flat vector, its shards and the in-order sum (see flat_layout.h).
#include "dist/flat_layout.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dist/dist.h"

namespace tg::dist {

void sum_in_order(std::span<const float* const> parts, float* out, int64_t n) {
  if (parts.empty()) throw std::invalid_argument("sum_in_order: no parts");
  if (out != parts[0]) std::memcpy(out, parts[0], size_t(n) * sizeof(float));
  for (size_t k = 1; k < parts.size(); ++k) {
    const float* p = parts[k];
    for (int64_t i = 0; i < n; ++i) out[i] += p[i];
  }
}

FlatLayout::FlatLayout(const std::vector<Tensor>& params, int parts) : parts_(parts) {
  if (parts < 1)
    throw std::invalid_argument("FlatLayout: parts must be at least 1, got " +
                                std::to_string(parts));
  for (const Tensor& p : params) {
    if (p.dtype() != DType::Float32 || !p.is_contiguous())
      throw std::invalid_argument("FlatLayout: parameters must be contiguous float32");
    offsets_.push_back(numel_);
    numel_ += p.numel();
  }
  offsets_.push_back(numel_);
}

void FlatLayout::for_range(int64_t lo, int64_t hi,
                           const std::function<void(size_t, int64_t, int64_t, int64_t)>& f) const {
  for (size_t k = 0; k + 1 < offsets_.size(); ++k) {
    const int64_t a = std::max(lo, offsets_[k]), b = std::min(hi, offsets_[k + 1]);
    if (a < b) f(k, a - offsets_[k], a, b - a);
  }
}

ShardBytes::ShardBytes(const FlatLayout& layout, size_t unit) {
  for (int r = 0; r < layout.parts(); ++r) {
    bytes.push_back(size_t(layout.end(r) - layout.begin(r)) * unit);
    offsets.push_back(size_t(layout.begin(r)) * unit);
  }
}

void broadcast_ids(std::vector<int64_t>& ids) {
  uint64_t n = ids.size();
  broadcast(&n, sizeof n);
  ids.resize(n);
  broadcast(ids.data(), n * sizeof(int64_t));
}

void share_batch_losses(std::vector<double>& losses) {
  const int ranks = size();
  if (ranks == 1) return;
  const int64_t n = int64_t(losses.size());
  std::vector<size_t> bytes, offsets;
  for (int r = 0; r < ranks; ++r) {
    offsets.push_back(size_t(n * r / ranks) * sizeof(double));
    bytes.push_back(size_t(n * (r + 1) / ranks - n * r / ranks) * sizeof(double));
  }
  const int me = rank();
  gather_all(losses.data() + n * me / ranks, losses.data(), bytes, offsets);
}

}  // namespace tg::dist
