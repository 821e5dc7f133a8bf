// The flat gradient vector that data parallelism exchanges, and the one sum over its parts.
//
// Parameters are laid end to end in named_parameters() order; rank r owns the contiguous shard
// [n·r/N, n·(r+1)/N). Every sum over micro-batches or ranks goes through sum_in_order(), in the
// order given, never through MPI's reduction: so one process and N ranks round alike.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace tg::dist {

// THE reduction of partial gradients: out[i] = ((parts[0][i] + parts[1][i]) + parts[2][i]) + ...
// for i < n, the parts in the order given. `out` may be parts[0].
void sum_in_order(std::span<const float* const> parts, float* out, int64_t n);

// Parameters laid end to end (the flat vector), cut into `parts` contiguous shards: shard r is
// [n*r/parts, n*(r+1)/parts). Throws std::invalid_argument for parts < 1 or a parameter that is
// not contiguous float32.
class FlatLayout {
 public:
  FlatLayout(const std::vector<Tensor>& params, int parts);
  int64_t numel() const { return numel_; }
  int parts() const { return parts_; }
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

// Every shard's size and flat offset in bytes, for elements of `unit` bytes (the block lists of
// dist::exchange and dist::gather_all).
struct ShardBytes {
  std::vector<size_t> bytes, offsets;
  ShardBytes(const FlatLayout& layout, size_t unit);
};

// Rank 0's token ids in every rank's `ids`.
void broadcast_ids(std::vector<int64_t>& ids);
// Each rank's contiguous share of `losses` (rank r: [n*r/N, n*(r+1)/N)) to every rank.
void share_batch_losses(std::vector<double>& losses);

}  // namespace tg::dist
