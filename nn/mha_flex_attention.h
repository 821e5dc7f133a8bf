// The bonus notebook's MHAPyTorchFlexAttention: multi-head attention through flex_attention
// (core/flex_attention.h) with the notebook's causal mask_mod, on tapegrad's fused kernel.
//
// Python reference: rasbt/LLMs-from-scratch, ch03/02_bonus_efficient-multihead-attention/
// mha-implementations.ipynb (MHAPyTorchFlexAttention, section 9 of the notebook, "Using PyTorch's
// FlexAttention"), which runs it on CUDA only; PyTorch 2.6 also runs flex_attention eagerly on the
// CPU, slowly (docs/chapter3.md).
//   qkv(x)                                                     (b, num_tokens, 3 * d_out)
//   .view(b, num_tokens, 3, num_heads, head_dim).permute(2, 0, 3, 1, 4)
//   queries, keys, values = qkv                                3 × (b, num_heads, num_tokens,
//   head_dim) block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=num_tokens,
//   KV_LEN=num_tokens) flex_attention(queries, keys, values, block_mask=block_mask) .transpose(1,
//   2).contiguous().view(b, num_tokens, d_out), then proj
// The block mask is built in every forward, as the notebook now does (it can no longer slice one
// made for context_length). Arguments in the notebook's order (num_heads before context_length).
// Draws: qkv's Linear, then proj's, so after manual_seed(123) the weights are PyTorch's; the
// parameters are laid out as MHAPyTorchScaledDotProduct's (qkv.weight, proj.weight, proj.bias).
//
// Not here: dropout. FlexAttention has none; the notebook stores its dropout argument and never
// uses it, and so does this class (any probability is accepted and ignored).
#pragma once
#include <memory>

#include "nn/linear.h"
#include "nn/module.h"

namespace tg::nn {

class MHAPyTorchFlexAttention : public Module {
 public:
  // Throws std::invalid_argument "d_out is indivisible by num_heads" (the notebook's assert).
  // Draws qkv, then proj.
  MHAPyTorchFlexAttention(int64_t d_in, int64_t d_out, int64_t num_heads, int64_t context_length,
                          double dropout = 0.0, bool qkv_bias = false, Generator* gen = nullptr);
  // x (b, num_tokens, d_in), num_tokens <= context_length -> (b, num_tokens, d_out)
  Tensor forward(const Tensor& x) override;

  int64_t num_heads, context_length, head_dim, d_out;
  std::shared_ptr<Linear> qkv;   // (d_in -> 3 * d_out): queries, keys, values side by side
  std::shared_ptr<Linear> proj;  // output projection
  double dropout;                // stored, unused (as the notebook's)
};

}  // namespace tg::nn
