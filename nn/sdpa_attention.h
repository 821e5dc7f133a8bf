// Multi-head attention through one scaled_dot_product_attention call (core/ops.h): the route of
// the book's bonus notebook on efficient multi-head attention, which tapegrad runs on its own
// fused kernel (core/kernels/attention.cpp) instead of PyTorch's.
//
// Python reference: rasbt/LLMs-from-scratch, ch03/02_bonus_efficient-multihead-attention/
// mha-implementations.ipynb (MHAPyTorchScaledDotProduct, section 5 of the notebook).
//
// MHAPyTorchScaledDotProduct is the notebook's class as it writes it: one Linear for q, k and v
// together, the heads split by view + permute, then
//   F.scaled_dot_product_attention(queries, keys, values, attn_mask=None,
//                                  dropout_p=dropout if training else 0, is_causal=True)
// and an output projection `proj`. Its arguments come in the notebook's order, num_heads before
// context_length (the book's MultiHeadAttention has them the other way round).
//
// MultiHeadAttentionSDPA is the book's §3.6.2 MultiHeadAttention, unchanged but for its attention
// core (scores, causal mask, softmax, dropout, weights · values), which is one
// scaled_dot_product_attention call. Same parameters, names and draws, the same dropout decisions,
// so the same state_dict: it is the GPT's `--attention fused` route, and checkpoints move between
// the two routes.
#pragma once
#include <memory>

#include "nn/linear.h"
#include "nn/module.h"
#include "nn/multihead_attention.h"

namespace tg::nn {

class MHAPyTorchScaledDotProduct : public Module {
 public:
  // Throws std::invalid_argument "d_out must be divisible by num_heads" (the notebook's assert).
  // Draws qkv, then proj.
  MHAPyTorchScaledDotProduct(int64_t d_in, int64_t d_out, int64_t num_heads, int64_t context_length,
                             double dropout = 0.0, bool qkv_bias = false, Generator* gen = nullptr);
  // x (b, num_tokens, d_in), num_tokens <= context_length -> (b, num_tokens, d_out)
  Tensor forward(const Tensor& x) override;

  int64_t num_heads, context_length, head_dim, d_out;
  std::shared_ptr<Linear> qkv;   // (d_in -> 3 * d_out): queries, keys, values side by side
  std::shared_ptr<Linear> proj;  // output projection
  double dropout;                // a probability, passed to scaled_dot_product_attention
  Generator* gen;                // its dropout's generator (null: the global one)
};

class MultiHeadAttentionSDPA : public MultiHeadAttention {
 public:
  using MultiHeadAttention::MultiHeadAttention;  // the book's arguments, draws and checks
  Tensor forward(const Tensor& x) override;
  // The book's KV cache (MultiHeadAttention::forward(x, use_cache)) with the same fused core:
  // causal when the cache held nothing before x (a prompt, a rebuild), no mask for one new
  // token (it sees every cached key), else the book's mask rows for x's positions.
  Tensor forward(const Tensor& x, bool use_cache) override;
};

}  // namespace tg::nn
