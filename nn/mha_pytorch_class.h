// The bonus notebook's MHAPyTorchClass: causal multi-head attention through
// torch.nn.MultiheadAttention (nn::MultiheadAttention, nn/torch_multihead_attention.h), then an
// output projection of its own.
//
// Python reference: rasbt/LLMs-from-scratch, ch03/02_bonus_efficient-multihead-attention/
// mha-implementations.ipynb, section 7 ("Using PyTorch's torch.nn.MultiheadAttention",
// need_weights=True: the weights are computed explicitly and averaged over the heads) and section 8
// (need_weights=False: the fused scaled_dot_product_attention).
//   multihead_attn = nn.MultiheadAttention(embed_dim=d_out, num_heads, dropout, bias=qkv_bias,
//                                          add_bias_kv=qkv_bias, batch_first=True)
//   proj = nn.Linear(d_out, d_out);  mask = triu(ones(context_length, context_length), 1).bool()
//   forward(x (b, num_tokens, d_out)):
//     attn_mask = mask[:num_tokens, :num_tokens] (mask[:context_length, :context_length] when
//                 num_tokens > context_length, which MultiheadAttention then refuses)
//     attn_output, _ = multihead_attn(x, x, x, attn_mask=attn_mask, need_weights=need_weights)
//     proj(attn_output)                                            (b, num_tokens, d_out)
// d_in is not used, as in the notebook: the input's last dim must be d_out.
// A bool mask True means "not allowed" in nn.MultiheadAttention (the opposite of
// scaled_dot_product_attention's convention), so this mask is causal.
//
// Draws, in the notebook's order: multihead_attn's (its out_proj's Linear, then xavier_uniform_ of
// in_proj_weight and, with qkv_bias, xavier_normal_ of bias_k and bias_v), then proj's Linear.
// Dropout on the attention weights draws F.dropout's mask over (b, num_heads, n, n'), n' = n + 1
// with qkv_bias (bias_k's position), on both paths.
#pragma once
#include <memory>

#include "nn/linear.h"
#include "nn/module.h"
#include "nn/torch_multihead_attention.h"

namespace tg::nn {

class MHAPyTorchClass : public Module {
 public:
  // Throws std::invalid_argument naming MultiheadAttention when d_out % num_heads != 0, or
  // MHAPyTorchClass when context_length < 1.
  MHAPyTorchClass(int64_t d_in, int64_t d_out, int64_t num_heads, int64_t context_length,
                  double dropout = 0.0, bool qkv_bias = false, bool need_weights = true,
                  Generator* gen = nullptr);
  // x (b, num_tokens, d_out) -> (b, num_tokens, d_out)
  Tensor forward(const Tensor& x) override;

  int64_t context_length;
  std::shared_ptr<MultiheadAttention> multihead_attn;
  bool need_weights;
  std::shared_ptr<Linear> proj;
  Tensor mask;  // bool buffer (context_length, context_length), True above the diagonal
};

}  // namespace tg::nn
