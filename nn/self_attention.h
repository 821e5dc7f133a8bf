// §3.4 self-attention with trainable weights (scaled dot-product attention), one sequence.
//
// Python reference: pkg/llms_from_scratch/ch03.py (SelfAttention_v1, SelfAttention_v2);
// ch03/01_main-chapter-code/ch03.ipynb §3.4.2, cells 23–24.
//   keys = x @ W_key, queries = x @ W_query, values = x @ W_value     (num_tokens, d_out)
//   attn_scores  = queries @ keys.T                                    (num_tokens, num_tokens)
//   attn_weights = softmax(attn_scores / sqrt(d_k), dim=-1)            d_k = keys.shape[-1]
//   context_vec  = attn_weights @ values                               (num_tokens, d_out)
//
// Not here: batches (the book's .T needs 2-D input; CausalAttention takes batches), masks and
// dropout (§3.5, causal_attention.h).
#pragma once
#include "nn/linear.h"
#include "nn/module.h"

namespace tg {
class Generator;
}

namespace tg::nn {

// §3.4.2, listing 3.1: raw (d_in, d_out) matrices from torch.rand, drawn W_query, W_key, W_value
// in that order (nn.Parameter(torch.rand(d_in, d_out))).
class SelfAttention_v1 : public Module {
 public:
  SelfAttention_v1(int64_t d_in, int64_t d_out, Generator* gen = nullptr);
  // x (num_tokens, d_in) -> context_vec (num_tokens, d_out)
  Tensor forward(const Tensor& x) override;

  int64_t d_in, d_out;
  Tensor W_query, W_key, W_value;  // (d_in, d_out), used as x @ W
};

// §3.4.2, listing 3.2: nn.Linear projections (weight (d_out, d_in), PyTorch's initialisation),
// optional bias. Exercise 3.1: equal to v1 when v1's W = Linear.weight.T.
class SelfAttention_v2 : public Module {
 public:
  SelfAttention_v2(int64_t d_in, int64_t d_out, bool qkv_bias = false, Generator* gen = nullptr);
  // x (num_tokens, d_in) -> context_vec (num_tokens, d_out)
  Tensor forward(const Tensor& x) override;

  int64_t d_in, d_out;
  std::shared_ptr<Linear> W_query, W_key, W_value;  // Changed: Linear instead of raw matrices
};

}  // namespace tg::nn
