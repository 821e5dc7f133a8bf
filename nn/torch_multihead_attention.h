// nn::MultiheadAttention: torch.nn.MultiheadAttention (PyTorch 2.6), the module the bonus
// notebook's MHAPyTorchClass wraps (nn/mha_pytorch_class.h). Not the book's §3.6.2
// MultiHeadAttention (nn/multihead_attention.h), whose layout and draws differ.
//
// Python reference: torch/nn/modules/activation.py (MultiheadAttention: __init__,
// _reset_parameters, forward) and torch/nn/functional.py (multi_head_attention_forward,
// _mha_shape_check, _canonical_mask, _in_projection_packed, _in_projection).
//
// Shapes (N batch, L target length, S source length, E = embed_dim, H = num_heads, hd = E / H):
//   query (L, N, E), key (S, N, kdim), value (S, N, vdim); batch_first: (N, L, E) ...;
//   unbatched: (L, E), (S, kdim), (S, vdim).
//   attn_output as query; attn_output_weights (N, L, S') averaged over the heads, or
//   (N, H, L, S') per head (unbatched: no N), S' = S + add_bias_kv + add_zero_attn.
//
// Parameters, with PyTorch's names in its state_dict order: in_proj_weight (3E, E) when
// kdim == vdim == E, else q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight (E, vdim);
// in_proj_bias (3E) when bias; bias_k, bias_v (1, 1, E) when add_bias_kv; out_proj (a Linear E ->
// E, its bias when bias).
//
// Draws, in PyTorch's order: out_proj's Linear draws its weight (and bias) when it is built in
// __init__; then _reset_parameters: xavier_uniform_ of in_proj_weight (or of q_, k_, v_proj_weight
// in that order), in_proj_bias and out_proj.bias set to 0 (no draw), xavier_normal_ of bias_k, then
// of bias_v. Same seed, same weights as torch.
//
// Forward (multi_head_attention_forward's slow path, in batch-first order internally):
//   q, k, v = query·Wqᵀ + bq, key·Wkᵀ + bk, value·Wvᵀ + bv           (N, L|S, E)
//   add_bias_kv: k, v get bias_k, bias_v as one more source position; masks get a 0 column
//   split heads (N, H, L|S, hd); add_zero_attn: k, v get a zero position, masks a 0 column
//   masks: bool True means "not allowed" (the opposite of scaled_dot_product_attention's) and
//   becomes -inf; a float mask is added. attn_mask (L, S) or (N·H, L, S), key_padding_mask (N, S),
//   summed into one additive mask.
//   need_weights: w = softmax(q·sqrt(1/hd)·kᵀ + mask), dropout(w), out = w·v, the weights returned
//   (after dropout, as PyTorch returns them), averaged over heads when average_attn_weights.
//   not need_weights: out = scaled_dot_product_attention(q, k, v, mask, p, is_causal) (core/ops.h,
//   tapegrad's fused kernel), no weights; is_causal drops attn_mask there unless a
//   key_padding_mask is given (then the merged mask is used), as PyTorch does.
//   merge heads, out_proj.
// Dropout (training mode, p > 0) draws F.dropout's mask over (N, H, L, S') from `gen` on both
// paths: PyTorch 2.6's CPU scaled_dot_product_attention with dropout runs its math path, which
// calls F.dropout on the same (N, H, L, S') weights, and so does the fused kernel here.
//
// Checks run before anything is computed, so two differ from PyTorch's: a key_padding_mask of the
// wrong shape is reported against (N, S) before add_bias_kv / add_zero_attn pad it (PyTorch
// reports the padded sizes), and attn_mask's shape is checked even where the is_causal hint
// drops it (the fused path without a padding mask), where PyTorch ignores it. Key and value
// feature sizes, and query/key batch sizes, get a message of their own (PyTorch fails in a
// linear or a view there).
//
// Not here: the inference fast path (torch._native_multi_head_attention; same values, different
// rounding), static_k / static_v, nested tensors, device/dtype arguments.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>

#include "nn/linear.h"
#include "nn/module.h"

namespace tg::nn {

class MultiheadAttention : public Module {
 public:
  // kdim, vdim == 0 mean None (embed_dim). Throws std::invalid_argument naming MultiheadAttention
  // when embed_dim or num_heads is not positive, embed_dim % num_heads != 0, dropout is outside
  // [0, 1] or kdim/vdim is negative; nothing is drawn then.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool add_bias_kv = false, bool add_zero_attn = false, int64_t kdim = 0,
                     int64_t vdim = 0, bool batch_first = false, Generator* gen = nullptr);

  // (attn_output, attn_output_weights); the weights are undefined when !need_weights. Masks are
  // optional (undefined), bool or floating. Throws std::invalid_argument naming
  // MultiheadAttention and the shapes for bad ranks, shapes, dtypes, or is_causal without
  // attn_mask (PyTorch's messages).
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(),
                                    bool need_weights = true, const Tensor& attn_mask = Tensor(),
                                    bool average_attn_weights = true, bool is_causal = false);
  // Self-attention, forward(x, x, x).first, so that the module runs where one tensor goes in.
  Tensor forward(const Tensor& x) override;

  int64_t embed_dim, kdim, vdim, num_heads, head_dim;
  double dropout;  // on the attention weights, training mode only
  bool batch_first, add_zero_attn;
  bool qkv_same_embed_dim;  // kdim == vdim == embed_dim: one packed in_proj_weight
  Tensor in_proj_weight;    // (3E, E), or undefined
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // (E, E), (E, kdim), (E, vdim), or undefined
  Tensor in_proj_bias;                                 // (3E), or undefined (bias=false)
  Tensor bias_k, bias_v;                               // (1, 1, E), or undefined
  std::shared_ptr<Linear> out_proj;
  Generator* gen;  // draws and dropout (null: the global generator)

 private:
  void reset_parameters();
};

}  // namespace tg::nn
