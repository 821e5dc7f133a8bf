#include "nn/mha_pytorch_class.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/ops.h"
#include "nn/attention_checks.h"
#include "nn/causal_mask.h"

namespace tg::nn {

MHAPyTorchClass::MHAPyTorchClass(int64_t d_in, int64_t d_out, int64_t num_heads,
                                 int64_t context_length, double dropout, bool qkv_bias,
                                 bool need_weights, Generator* gen)
    : Module("MHAPyTorchClass"),
      context_length(detail::checked_context_length("MHAPyTorchClass", context_length)),
      need_weights(need_weights) {
  (void)d_in;  // the notebook's class takes it and never uses it
  register_module("multihead_attn", &multihead_attn,
                  std::make_shared<MultiheadAttention>(d_out, num_heads, dropout, qkv_bias,
                                                       /*add_bias_kv=*/qkv_bias,
                                                       /*add_zero_attn=*/false, 0, 0,
                                                       /*batch_first=*/true, gen));
  register_module("proj", &proj, std::make_shared<Linear>(d_out, d_out, true, gen));
  register_buffer("mask", &mask, causal_mask(context_length).to(DType::Bool));
}

Tensor MHAPyTorchClass::forward(const Tensor& x) {
  const int64_t d_out = multihead_attn->embed_dim;
  if (!x.defined() || x.dim() != 3 || x.size(2) != d_out)
    throw std::invalid_argument(
        "MHAPyTorchClass: expected x (b, num_tokens, d_out) with d_out = " + std::to_string(d_out) +
        " (the notebook's class never uses d_in), got " +
        (x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor")));
  const int64_t num_tokens = x.size(1);

  // Ensure attn_mask is compatible with expected shape and `batch_first=True`
  // (the notebook slices context_length rows when num_tokens is longer, which
  // MultiheadAttention then refuses with the mask's shape)
  const int64_t n = std::min(context_length, num_tokens);
  const Tensor attn_mask = mask.slice(0, 0, n).slice(1, 0, n);

  // attn_mask broadcasting will handle batch_size dimension implicitly
  const Tensor attn_output =
      multihead_attn->forward(x, x, x, Tensor(), need_weights, attn_mask).first;
  return (*proj)(attn_output);
}

}  // namespace tg::nn
