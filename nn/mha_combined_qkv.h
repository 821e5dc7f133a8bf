// The bonus notebook's MultiHeadAttentionCombinedQKV: the chapter's multi-head attention (§3.6.2)
// with one Linear for queries, keys and values together, the heads split by view + permute.
//
// Python reference: rasbt/LLMs-from-scratch, ch03/02_bonus_efficient-multihead-attention/
// mha-implementations.ipynb, section 3 ("An alternative multi-head attention with combined
// weights").
//   qkv = self.qkv(x)                                       (b, n, 3 * d_out)
//   qkv.view(b, n, 3, num_heads, head_dim).permute(2, 0, 3, 1, 4)   (3, b, num_heads, n, head_dim)
//   queries, keys, values = qkv.unbind(0)                   3 x (b, num_heads, n, head_dim)
//   attn_scores = queries @ keys.transpose(-2, -1), masked_fill(mask[:n, :n].bool(), -inf)
//   softmax(attn_scores / head_dim ** 0.5), dropout, @ values   (b, num_heads, n, head_dim)
//   .transpose(1, 2).contiguous().view(b, n, embed_dim)      (b, n, d_out)
//   proj(context_vec)                                       (b, n, d_out)
//
// Differences from the chapter's class: the arguments come in the notebook's SDPA-style order
// (num_heads before context_length, dropout and qkv_bias defaulted), the assert reads "d_out is
// indivisible by num_heads", the output projection is `proj`, and qkv's weight is the chapter's
// W_query, W_key, W_value weights stacked (rows 0..d_out-1 the queries'), though drawn as one
// (3 * d_out, d_in) Linear, so not the same numbers. Draws: qkv, then proj.
//
// The notebook's forward takes embed_dim from x, so it only runs when d_in == d_out: PyTorch
// fails in the last view ("shape '[b, n, d_in]' is invalid for input of size b*n*d_out"); this
// class says so before computing anything.
#pragma once
#include <memory>

#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace tg::nn {

class MultiHeadAttentionCombinedQKV : public Module {
 public:
  // Throws std::invalid_argument "d_out is indivisible by num_heads" (the notebook's assert).
  MultiHeadAttentionCombinedQKV(int64_t d_in, int64_t d_out, int64_t num_heads,
                                int64_t context_length, double dropout = 0.0, bool qkv_bias = false,
                                Generator* gen = nullptr);
  // x (b, num_tokens, d_in), num_tokens <= context_length, d_in == d_out -> (b, num_tokens, d_out)
  Tensor forward(const Tensor& x) override;

  int64_t num_heads, context_length, head_dim, d_out;
  std::shared_ptr<Linear> qkv;   // (d_in -> 3 * d_out): queries, keys, values side by side
  std::shared_ptr<Linear> proj;  // output projection
  std::shared_ptr<Dropout> dropout;
  Tensor mask;  // buffer triu(ones(context_length, context_length), 1)
};

}  // namespace tg::nn
