// §3.5.3 compact causal attention: SelfAttention_v2 plus a causal mask, dropout on the attention
// weights, and batches.
//
// Python reference: pkg/llms_from_scratch/ch03.py (CausalAttention); ch03.ipynb cell 34.
//   keys, queries, values = W_key(x), W_query(x), W_value(x)          (b, num_tokens, d_out)
//   attn_scores = queries @ keys.transpose(1, 2)                      (b, num_tokens, num_tokens)
//   attn_scores.masked_fill_(mask.bool()[:num_tokens, :num_tokens], -inf)
//   attn_weights = dropout(softmax(attn_scores / sqrt(d_k), dim=-1))
//   context_vec  = attn_weights @ values                              (b, num_tokens, d_out)
//
// Not here: key/value caches, padding masks, a fused kernel.
#pragma once
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace tg {
class Generator;
}

namespace tg::nn {

class CausalAttention : public Module {
 public:
  // Draws W_query, W_key, W_value in that order (dropout and the mask draw nothing).
  CausalAttention(int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                  bool qkv_bias = false, Generator* gen = nullptr);
  // x (b, num_tokens, d_in), num_tokens <= context_length -> context_vec (b, num_tokens, d_out)
  Tensor forward(const Tensor& x) override;

  int64_t d_in, d_out, context_length;
  std::shared_ptr<Linear> W_query, W_key, W_value;
  std::shared_ptr<Dropout> dropout;  // New: on the attention weights
  Tensor mask;  // New: buffer triu(ones(context_length, context_length), 1), 1 = future token
};

}  // namespace tg::nn
