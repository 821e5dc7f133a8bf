#include "nn/causal_attention.h"

#include <cmath>
#include <limits>

#include "core/ops.h"
#include "nn/attention_checks.h"
#include "nn/causal_mask.h"

namespace tg::nn {

CausalAttention::CausalAttention(int64_t d_in, int64_t d_out, int64_t context_length,
                                 double dropout, bool qkv_bias, Generator* gen)
    : Module("CausalAttention"),
      d_in(d_in),
      d_out(d_out),
      context_length(detail::checked_context_length("CausalAttention", context_length)) {
  register_module("W_query", &W_query, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
  register_module("W_key", &W_key, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
  register_module("W_value", &W_value, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
  register_module("dropout", &this->dropout, std::make_shared<Dropout>(dropout, gen));
  register_buffer("mask", &mask, causal_mask(context_length));
}

Tensor CausalAttention::forward(const Tensor& x) {
  detail::check_attention_input("CausalAttention", x, 3, d_in, context_length);
  const int64_t num_tokens = x.size(1);  // b, num_tokens, d_in = x.shape
  const Tensor keys = (*W_key)(x);       // (b, num_tokens, d_out)
  const Tensor queries = (*W_query)(x);
  const Tensor values = (*W_value)(x);

  Tensor attn_scores = matmul(queries, keys.transpose(1, 2));  // Changed: transpose for batches
  // New: future tokens get -inf, so softmax gives them weight 0. The mask is cut to num_tokens
  // for inputs shorter than context_length.
  const Tensor mask_bool = mask.to(DType::Bool).slice(0, 0, num_tokens).slice(1, 0, num_tokens);
  attn_scores.masked_fill_(mask_bool, -std::numeric_limits<double>::infinity());
  Tensor attn_weights = softmax(attn_scores / std::pow(double(keys.size(-1)), 0.5), -1);
  attn_weights = (*dropout)(attn_weights);  // New

  const Tensor context_vec = matmul(attn_weights, values);  // (b, num_tokens, d_out)
  return context_vec;
}

}  // namespace tg::nn
