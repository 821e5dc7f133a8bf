// The bonus notebook's MHAEinsum: the chapter's multi-head attention (§3.6.2) with its three
// projections and both attention products written as Einstein sums (tg::einsum, core/ops.h).
//
// Python reference: rasbt/LLMs-from-scratch, ch03/02_bonus_efficient-multihead-attention/
// mha-implementations.ipynb (MHAEinsum, section 4 of the notebook, "Multi-head attention with
// Einsum").
//   Q = einsum("bnd,do->bno", x, W_query) (+ bias_q)           (b, n, d_out), so K and V
//   Q.view(b, n, num_heads, head_dim).transpose(1, 2)            (b, num_heads, n, head_dim)
//   scores = einsum("bhnd,bhmd->bhnm", Q, K) / head_dim ** 0.5   (b, num_heads, n, n)
//   masked_fill(mask[:n, :n].bool(), -inf), softmax, dropout
//   einsum("bhnm,bhmd->bhnd", attn_weights, V).transpose(1, 2).reshape(b, n, d_out)
//   out_proj(context_vec)                                        (b, n, d_out)
//
// Unlike the chapter's class, the weights are bare (d_in, d_out) parameters, the transpose of
// MultiHeadAttention's W_query.weight (the book's test copies weights that way), and the biases
// are parameters of their own. Draws, in the notebook's order: torch.randn(d_in, d_out) for
// W_query, W_key, W_value; out_proj's Linear; then reset_parameters() overwrites the weights with
// kaiming_uniform_(a=sqrt(5)), whose fan_in is a weight's size(1) = d_out, and then draws each
// bias from uniform_(-1/sqrt(d_out), 1/sqrt(d_out)).
//
// Not here: a KV cache.
#pragma once
#include <memory>

#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace tg::nn {

class MHAEinsum : public Module {
 public:
  // Throws std::invalid_argument "d_out must be divisible by num_heads" (the notebook's assert).
  MHAEinsum(int64_t d_in, int64_t d_out, int64_t context_length, double dropout, int64_t num_heads,
            bool qkv_bias = false, Generator* gen = nullptr);
  // x (b, num_tokens, d_in), num_tokens <= context_length -> (b, num_tokens, d_out)
  Tensor forward(const Tensor& x) override;
  // The notebook's reset_parameters(): redraws the weights, then the biases, from gen.
  void reset_parameters();

  int64_t d_in, d_out, context_length, num_heads, head_dim;
  Tensor W_query, W_key, W_value;  // (d_in, d_out)
  Tensor bias_q, bias_k, bias_v;   // (d_out); undefined (None) without qkv_bias
  std::shared_ptr<Linear> out_proj;
  std::shared_ptr<Dropout> dropout;
  Tensor mask;     // buffer triu(ones(context_length, context_length), 1)
  Generator* gen;  // the draws' generator (null: the global one)
};

}  // namespace tg::nn
