#include "nn/causal_mask.h"

#include <limits>
#include <stdexcept>

#include "core/ops.h"

namespace tg::nn {

namespace {
void check_square(const char* fn, const Tensor& t) {
  if (t.dim() < 2 || t.size(-1) != t.size(-2))
    throw std::invalid_argument(std::string(fn) +
                                ": expected (..., num_tokens, num_tokens) scores, got " +
                                shape_str(t.shape()));
}
}  // namespace

Tensor mask_simple(int64_t context_length) { return tril(ones({context_length, context_length})); }

Tensor masked_simple_norm(const Tensor& attn_weights) {
  check_square("masked_simple_norm", attn_weights);
  const Tensor masked_simple = attn_weights * mask_simple(attn_weights.size(-1));
  const Tensor row_sums = masked_simple.sum(-1, /*keepdim=*/true);
  return masked_simple / row_sums;
}

Tensor causal_mask(int64_t context_length) {
  return triu(ones({context_length, context_length}), 1);
}

Tensor mask_future_scores(const Tensor& attn_scores) {
  check_square("mask_future_scores", attn_scores);
  const Tensor mask = causal_mask(attn_scores.size(-1));
  return attn_scores.masked_fill(mask.to(DType::Bool), -std::numeric_limits<double>::infinity());
}

}  // namespace tg::nn
