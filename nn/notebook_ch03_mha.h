// The bonus notebook's first two classes: chapter 3's attention under the notebook's names.
//
// Python reference: rasbt/LLMs-from-scratch, ch03/02_bonus_efficient-multihead-attention/
// mha-implementations.ipynb, section 1 ("CausalAttention MHA wrapper class from chapter 3",
// Ch03_MHA_Wrapper) and section 2 ("The multi-head attention class from chapter 3", Ch03_MHA).
//
// Ch03_MHA_Wrapper is §3.6.1's MultiHeadAttentionWrapper plus what the chapter's wrapper lacks,
// an output projection over the concatenated heads:
//   context_vec = torch.cat([head(x) for head in self.heads], dim=-1)   (b, n, num_heads * d_out)
//   out_proj(context_vec)  Linear(d_out * num_heads, d_out * num_heads) (b, n, num_heads * d_out)
// d_out is still each head's width (the notebook passes embed_dim // 12 with 12 heads). The
// notebook's CausalAttention cell is the chapter's (comments aside), so the heads are
// nn::CausalAttention. Draws: head 0's W_query, W_key, W_value, head 1's, ..., then out_proj.
//
// Ch03_MHA is §3.6.2's MultiHeadAttention, unchanged (the notebook copies the chapter's cell):
// same arguments, draws (W_query, W_key, W_value, out_proj), assert text and forward; only the
// class name in its errors differs.
#pragma once
#include <memory>

#include "nn/linear.h"
#include "nn/multihead_attention.h"
#include "nn/multihead_wrapper.h"

namespace tg::nn {

class Ch03_MHA_Wrapper : public MultiHeadAttentionWrapper {
 public:
  Ch03_MHA_Wrapper(int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                   int64_t num_heads, bool qkv_bias = false, Generator* gen = nullptr);
  // x (b, num_tokens, d_in), num_tokens <= context_length -> (b, num_tokens, num_heads * d_out)
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> out_proj;  // New in the notebook: mixes the heads' outputs
};

class Ch03_MHA : public MultiHeadAttention {
 public:
  // Throws std::invalid_argument "Ch03_MHA: d_out must be divisible by num_heads (...)".
  Ch03_MHA(int64_t d_in, int64_t d_out, int64_t context_length, double dropout, int64_t num_heads,
           bool qkv_bias = false, Generator* gen = nullptr)
      : MultiHeadAttention("Ch03_MHA", d_in, d_out, context_length, dropout, num_heads, qkv_bias,
                           gen) {}
};

}  // namespace tg::nn
