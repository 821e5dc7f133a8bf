#include "nn/multihead_attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "core/ops.h"
#include "nn/attention_checks.h"
#include "nn/causal_mask.h"

namespace tg::nn {

MultiHeadAttention::MultiHeadAttention(int64_t d_in, int64_t d_out, int64_t context_length,
                                       double dropout, int64_t num_heads, bool qkv_bias,
                                       Generator* gen)
    : Module("MultiHeadAttention"),
      d_in(d_in),
      d_out(d_out),
      context_length(context_length),
      num_heads(num_heads),
      head_dim(detail::checked_head_dim("MultiHeadAttention", d_out,
                                        num_heads)) {  // Reduce the projection dim per head
  register_module("W_query", &W_query, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
  register_module("W_key", &W_key, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
  register_module("W_value", &W_value, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
  register_module("out_proj", &out_proj, std::make_shared<Linear>(d_out, d_out, true, gen));
  register_module("dropout", &this->dropout, std::make_shared<Dropout>(dropout, gen));
  register_buffer("mask", &mask, causal_mask(context_length));
}

Tensor MultiHeadAttention::forward(const Tensor& x) {
  detail::check_attention_input("MultiHeadAttention", x, 3, d_in, context_length);
  const int64_t b = x.size(0), num_tokens = x.size(1);

  Tensor keys = (*W_key)(x);  // (b, num_tokens, d_out)
  Tensor queries = (*W_query)(x);
  Tensor values = (*W_value)(x);

  // Split the last dim: (b, num_tokens, d_out) -> (b, num_tokens, num_heads, head_dim)
  keys = keys.view({b, num_tokens, num_heads, head_dim});
  values = values.view({b, num_tokens, num_heads, head_dim});
  queries = queries.view({b, num_tokens, num_heads, head_dim});

  // (b, num_tokens, num_heads, head_dim) -> (b, num_heads, num_tokens, head_dim)
  keys = keys.transpose(1, 2);
  queries = queries.transpose(1, 2);
  values = values.transpose(1, 2);

  // Scaled dot-product attention with a causal mask, every head at once
  Tensor attn_scores = matmul(queries, keys.transpose(2, 3));  // (b, num_heads, T, T)
  const Tensor mask_bool = mask.to(DType::Bool).slice(0, 0, num_tokens).slice(1, 0, num_tokens);
  attn_scores.masked_fill_(mask_bool, -std::numeric_limits<double>::infinity());

  Tensor attn_weights = softmax(attn_scores / std::pow(double(keys.size(-1)), 0.5), -1);
  attn_weights = (*dropout)(attn_weights);

  // (b, num_heads, num_tokens, head_dim) -> (b, num_tokens, num_heads, head_dim)
  Tensor context_vec = matmul(attn_weights, values).transpose(1, 2);
  // Combine heads, d_out = num_heads * head_dim
  context_vec = context_vec.contiguous().view({b, num_tokens, d_out});
  context_vec = (*out_proj)(context_vec);  // optional projection
  return context_vec;
}

}  // namespace tg::nn
