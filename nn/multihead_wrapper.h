// §3.6.1 stacking single-head attention layers: num_heads CausalAttention modules side by side,
// their outputs concatenated along the last dim.
//
// Python reference: pkg/llms_from_scratch/ch03.py (MultiHeadAttentionWrapper); ch03.ipynb cell 35.
//   context_vec = torch.cat([head(x) for head in self.heads], dim=-1)   (b, num_tokens,
//   num_heads*d_out)
//
// Note the book's convention here: d_out is each head's width, so the output is num_heads * d_out
// wide (MultiHeadAttention's d_out is the total).
//
// Not here: an output projection (the bonus notebook's variant, Ch03_MHA_Wrapper in
// nn/notebook_ch03_mha.h, adds one).
#pragma once
#include "nn/causal_attention.h"
#include "nn/containers.h"
#include "nn/module.h"

namespace tg::nn {

class MultiHeadAttentionWrapper : public Module {
 public:
  // Builds (and draws) head 0 completely, then head 1, ... as the Python list comprehension does.
  MultiHeadAttentionWrapper(int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                            int64_t num_heads, bool qkv_bias = false, Generator* gen = nullptr)
      : MultiHeadAttentionWrapper("MultiHeadAttentionWrapper", d_in, d_out, context_length, dropout,
                                  num_heads, qkv_bias, gen) {}
  // x (b, num_tokens, d_in) -> (b, num_tokens, num_heads * d_out)
  Tensor forward(const Tensor& x) override;

  CausalAttention& head(size_t i) const { return static_cast<CausalAttention&>((*heads)[i]); }

  int64_t d_in, d_out, context_length, num_heads;
  std::shared_ptr<ModuleList> heads;  // of CausalAttention

 protected:
  // The heads under another class name (the notebook's Ch03_MHA_Wrapper), which errors then give.
  MultiHeadAttentionWrapper(const char* name, int64_t d_in, int64_t d_out, int64_t context_length,
                            double dropout, int64_t num_heads, bool qkv_bias, Generator* gen);
};

}  // namespace tg::nn
