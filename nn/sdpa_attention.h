// Multi-head attention through one scaled_dot_product_attention call (core/ops.h): the route of
// the book's bonus notebook on efficient multi-head attention, which tapegrad runs on its own
// fused kernel (core/kernels/attention.cpp) instead of PyTorch's.
//
// Python reference: rasbt/LLMs-from-scratch, ch03/02_bonus_efficient-multihead-attention/
// mha-implementations.ipynb (MHAPyTorchScaledDotProduct, section 5 of the notebook;
// MHAPyTorchSDPAWithoutFlash, section 6, below).
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
  // Throws std::invalid_argument "d_out is indivisible by num_heads" (the notebook's assert).
  // Draws qkv, then proj.
  MHAPyTorchScaledDotProduct(int64_t d_in, int64_t d_out, int64_t num_heads, int64_t context_length,
                             double dropout = 0.0, bool qkv_bias = false, Generator* gen = nullptr)
      : MHAPyTorchScaledDotProduct("MHAPyTorchScaledDotProduct", d_in, d_out, num_heads,
                                   context_length, dropout, qkv_bias, gen) {}
  // x (b, num_tokens, d_in), num_tokens <= context_length -> (b, num_tokens, d_out)
  Tensor forward(const Tensor& x) override;

  int64_t num_heads, context_length, head_dim, d_out;
  std::shared_ptr<Linear> qkv;   // (d_in -> 3 * d_out): queries, keys, values side by side
  std::shared_ptr<Linear> proj;  // output projection
  double dropout;                // a probability, passed to scaled_dot_product_attention
  Generator* gen;                // its dropout's generator (null: the global one)

 protected:
  // For MHAPyTorchSDPAWithoutFlash, whose errors name it.
  MHAPyTorchScaledDotProduct(const char* name, int64_t d_in, int64_t d_out, int64_t num_heads,
                             int64_t context_length, double dropout, bool qkv_bias, Generator* gen);
  // The notebook's forward around its one scaled_dot_product_attention call, given that call's
  // attn_mask (context_length x context_length, cut here to [:num_tokens, :num_tokens]; or
  // undefined) and is_causal.
  Tensor attend(const Tensor& x, const Tensor& attn_mask, bool is_causal);
};

// The notebook's section 6 ("PyTorch's scaled dot product attention without FlashAttention"):
// MHAPyTorchScaledDotProduct, but with an explicit mask buffer passed to
//   F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask[:n, :n],
//                                  dropout_p=dropout if training else 0, is_causal=False)
// "to disable FlashAttention". The buffer is torch.triu(ones(context_length, context_length),
// diagonal=1).bool(): True strictly above the diagonal. The chapter's classes fill those
// positions with -inf, but SDPA reads a bool True as "takes part", so this mask is the causal
// mask's complement minus the diagonal: query i sees only the keys j > i, the future, and the
// last query (i = num_tokens - 1) sees no key at all. That is what the notebook computes, and this
// class reproduces it, PyTorch 2.6's output for such rows included: a row no key reaches gives a
// context vector of 0 (the CPU flash kernel and the math path's _safe_softmax alike), so that
// token's output is proj.bias, and no gradient flows through it (tests/golden/
// gen_mha_notebook.py). Same arguments, assert, draws (qkv, then proj) and names as section 5's
// class, plus the bool buffer `mask` (first in state_dict, as PyTorch orders it).
class MHAPyTorchSDPAWithoutFlash : public MHAPyTorchScaledDotProduct {
 public:
  MHAPyTorchSDPAWithoutFlash(int64_t d_in, int64_t d_out, int64_t num_heads, int64_t context_length,
                             double dropout = 0.0, bool qkv_bias = false, Generator* gen = nullptr);
  // x (b, num_tokens, d_in), num_tokens <= context_length -> (b, num_tokens, d_out). (The
  // notebook's branch for num_tokens > context_length hands SDPA a mask that does not broadcast;
  // here the input check rejects such an x first.)
  Tensor forward(const Tensor& x) override;

  Tensor mask;  // bool buffer triu(ones(context_length, context_length), 1): True = takes part
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
