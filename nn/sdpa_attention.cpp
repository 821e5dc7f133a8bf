#include "nn/sdpa_attention.h"

#include <stdexcept>
#include <string>

#include "core/ops.h"
#include "nn/attention_checks.h"
#include "nn/causal_mask.h"
#include "nn/dropout.h"

namespace tg::nn {

MHAPyTorchScaledDotProduct::MHAPyTorchScaledDotProduct(const char* name, int64_t d_in,
                                                       int64_t d_out, int64_t num_heads,
                                                       int64_t context_length, double dropout,
                                                       bool qkv_bias, Generator* gen)
    : Module(name),
      num_heads(num_heads),
      context_length(detail::checked_context_length(name, context_length)),
      head_dim(
          detail::checked_head_dim(name, d_out, num_heads, "d_out is indivisible by num_heads")),
      d_out(d_out),
      dropout(dropout),
      gen(gen) {
  if (!(dropout >= 0 && dropout <= 1))
    throw std::invalid_argument(std::string(name) + ": dropout must be in [0, 1], got " +
                                std::to_string(dropout));
  register_module("qkv", &qkv, std::make_shared<Linear>(d_in, 3 * d_out, qkv_bias, gen));
  register_module("proj", &proj, std::make_shared<Linear>(d_out, d_out, true, gen));
}

Tensor MHAPyTorchScaledDotProduct::forward(const Tensor& x) {
  return attend(x, Tensor(), /*is_causal=*/true);
}

Tensor MHAPyTorchScaledDotProduct::attend(const Tensor& x, const Tensor& attn_mask,
                                          bool is_causal) {
  detail::check_attention_input(type_name().c_str(), x, 3, qkv->in_features, context_length);
  const int64_t batch_size = x.size(0), num_tokens = x.size(1);

  // (b, num_tokens, embed_dim) --> (b, num_tokens, 3 * embed_dim)
  Tensor qkv_out = (*qkv)(x);
  // (b, num_tokens, 3 * embed_dim) --> (b, num_tokens, 3, num_heads, head_dim)
  qkv_out = qkv_out.view({batch_size, num_tokens, 3, num_heads, head_dim});
  // (b, num_tokens, 3, num_heads, head_dim) --> (3, b, num_heads, num_tokens, head_dim)
  qkv_out = qkv_out.permute({2, 0, 3, 1, 4});
  // (3, b, num_heads, num_tokens, head_dim) -> 3 times (b, num_heads, num_tokens, head_dim)
  const Tensor queries = qkv_out[0], keys = qkv_out[1], values = qkv_out[2];

  const double use_dropout = is_training() ? dropout : 0.0;
  Tensor mask;  // attn_mask[:num_tokens, :num_tokens] (num_tokens <= context_length, checked)
  if (attn_mask.defined()) mask = attn_mask.slice(0, 0, num_tokens).slice(1, 0, num_tokens);
  Tensor context_vec =
      scaled_dot_product_attention(queries, keys, values, mask, use_dropout, is_causal, {}, gen);

  // (b, num_heads, num_tokens, head_dim) --> (b, num_tokens, num_heads, head_dim)
  //                                      --> (b, num_tokens, embed_dim)
  context_vec = context_vec.transpose(1, 2).contiguous().view({batch_size, num_tokens, d_out});
  return (*proj)(context_vec);
}

MHAPyTorchSDPAWithoutFlash::MHAPyTorchSDPAWithoutFlash(int64_t d_in, int64_t d_out,
                                                       int64_t num_heads, int64_t context_length,
                                                       double dropout, bool qkv_bias,
                                                       Generator* gen)
    : MHAPyTorchScaledDotProduct("MHAPyTorchSDPAWithoutFlash", d_in, d_out, num_heads,
                                 context_length, dropout, qkv_bias, gen) {
  register_buffer("mask", &mask, causal_mask(context_length).to(DType::Bool));
}

Tensor MHAPyTorchSDPAWithoutFlash::forward(const Tensor& x) {
  // Not causal: True above the diagonal lets each query see only later keys (header).
  return attend(x, mask, /*is_causal=*/false);
}

Tensor MultiHeadAttentionSDPA::forward(const Tensor& x) {
  detail::check_attention_input("MultiHeadAttention", x, 3, d_in, context_length);
  const int64_t b = x.size(0), num_tokens = x.size(1);

  // As the book: project, split the heads, (b, num_heads, num_tokens, head_dim)
  const Tensor keys = (*W_key)(x).view({b, num_tokens, num_heads, head_dim}).transpose(1, 2);
  const Tensor queries = (*W_query)(x).view({b, num_tokens, num_heads, head_dim}).transpose(1, 2);
  const Tensor values = (*W_value)(x).view({b, num_tokens, num_heads, head_dim}).transpose(1, 2);

  // Changed: scores, causal mask, softmax(/ sqrt(head_dim)), dropout and weights · values in one
  // fused op, drawing the dropout mask the book's self.dropout would draw.
  const double p = dropout->is_training() ? dropout->p : 0.0;
  Tensor context_vec =
      scaled_dot_product_attention(queries, keys, values, Tensor(), p, true, {}, dropout->gen);

  // As the book: merge the heads, out_proj
  context_vec = context_vec.transpose(1, 2).contiguous().view({b, num_tokens, d_out});
  return (*out_proj)(context_vec);
}

Tensor MultiHeadAttentionSDPA::forward(const Tensor& x, bool use_cache) {
  if (!use_cache) return forward(x);
  check_cache_room(x);
  const int64_t b = x.size(0), num_tokens = x.size(1);
  const Tensor keys_new = (*W_key)(x).view({b, num_tokens, num_heads, head_dim});
  const Tensor values_new = (*W_value)(x).view({b, num_tokens, num_heads, head_dim});
  const Tensor queries = (*W_query)(x).view({b, num_tokens, num_heads, head_dim}).transpose(1, 2);
  const int64_t start = append_to_cache(keys_new, values_new);
  const Tensor keys = cache_k.slice(2, 0, cache_len);  // (b, num_heads, cache_len, head_dim)
  const Tensor values = cache_v.slice(2, 0, cache_len);

  // Query t sits at position start + t and sees keys 0 .. start + t. From an empty cache that
  // is plain causal attention, the kernel's fast case; one new token sees every key.
  Tensor keep;  // bool, true where a key takes part
  if (start > 0 && num_tokens > 1)
    keep = eq(mask.slice(0, start, cache_len).slice(1, 0, cache_len), 0.0);
  const double p = dropout->is_training() ? dropout->p : 0.0;
  Tensor context_vec =
      scaled_dot_product_attention(queries, keys, values, keep, p, start == 0, {}, dropout->gen);
  context_vec = context_vec.transpose(1, 2).contiguous().view({b, num_tokens, d_out});
  return (*out_proj)(context_vec);
}

}  // namespace tg::nn
