// §3.5.1 causal attention masks, the two ways the book builds them.
//
// Python reference: ch03/01_main-chapter-code/ch03.ipynb cells 26–30.
//   1. after softmax: zero the weights above the diagonal with tril(ones) and renormalise rows;
//   2. before softmax: fill the scores above the diagonal (triu(ones, 1)) with -inf, so softmax
//      gives them weight 0 and the rows already sum to 1. Same result, one pass (what
//      CausalAttention does).
//
// Not here: padding masks, sliding windows.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace tg::nn {

// torch.tril(torch.ones(context_length, context_length)): 1 on and below the diagonal.
Tensor mask_simple(int64_t context_length);
// Way 1: masked_simple = attn_weights * mask_simple; masked_simple / row sums.
// attn_weights (num_tokens, num_tokens) -> same shape, rows sum to 1 again
Tensor masked_simple_norm(const Tensor& attn_weights);
// torch.triu(torch.ones(context_length, context_length), diagonal=1): 1 strictly above it.
Tensor causal_mask(int64_t context_length);
// Way 2: attn_scores.masked_fill(mask.bool(), -inf) for the last two dims (any leading dims).
Tensor mask_future_scores(const Tensor& attn_scores);

}  // namespace tg::nn
