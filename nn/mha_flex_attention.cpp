#include "nn/mha_flex_attention.h"

#include "core/flex_attention.h"
#include "nn/attention_checks.h"

namespace tg::nn {

MHAPyTorchFlexAttention::MHAPyTorchFlexAttention(int64_t d_in, int64_t d_out, int64_t num_heads,
                                                 int64_t context_length, double dropout,
                                                 bool qkv_bias, Generator* gen)
    : Module("MHAPyTorchFlexAttention"),
      num_heads(num_heads),
      context_length(detail::checked_context_length("MHAPyTorchFlexAttention", context_length)),
      head_dim(detail::checked_head_dim("MHAPyTorchFlexAttention", d_out, num_heads,
                                        "d_out is indivisible by num_heads")),
      d_out(d_out),
      dropout(dropout) {
  register_module("qkv", &qkv, std::make_shared<Linear>(d_in, 3 * d_out, qkv_bias, gen));
  register_module("proj", &proj, std::make_shared<Linear>(d_out, d_out, true, gen));
}

Tensor MHAPyTorchFlexAttention::forward(const Tensor& x) {
  detail::check_attention_input("MHAPyTorchFlexAttention", x, 3, qkv->in_features, context_length);
  const int64_t batch_size = x.size(0), num_tokens = x.size(1);

  // (b, num_tokens, embed_dim) --> (b, num_tokens, 3 * embed_dim)
  Tensor qkv_out = (*qkv)(x);
  // (b, num_tokens, 3 * embed_dim) --> (b, num_tokens, 3, num_heads, head_dim)
  qkv_out = qkv_out.view({batch_size, num_tokens, 3, num_heads, head_dim});
  // (b, num_tokens, 3, num_heads, head_dim) --> (3, b, num_heads, num_tokens, head_dim)
  qkv_out = qkv_out.permute({2, 0, 3, 1, 4});
  // (3, b, num_heads, num_tokens, head_dim) -> 3 times (b, num_heads, num_tokens, head_dim)
  const Tensor queries = qkv_out[0], keys = qkv_out[1], values = qkv_out[2];

  // New: a fresh block mask per forward, for this num_tokens (the notebook's `causal`)
  const BlockMask attn_mask =
      create_block_mask(causal_mask(), std::nullopt, std::nullopt, num_tokens, num_tokens);
  Tensor context_vec = flex_attention(queries, keys, values, nullptr, attn_mask);

  // Combine heads, where self.d_out = self.num_heads * self.head_dim
  context_vec = context_vec.transpose(1, 2).contiguous().view({batch_size, num_tokens, d_out});
  return (*proj)(context_vec);
}

}  // namespace tg::nn
