// §3.3.1–3.3.2: a simplified self-attention without trainable weights.
//
// Python reference: ch03/01_main-chapter-code/ch03.ipynb, cells 3–13 (the book has no class for
// this; these functions are the notebook's loops and one-liners, named after its variables).
// Each token's embedding is its own query, key and value:
//   attn_scores  = inputs @ inputs.T        (num_tokens, num_tokens)   ω_ij = x^(i) · x^(j)
//   attn_weights = softmax(attn_scores, -1)  rows sum to 1
//   context_vecs = attn_weights @ inputs     (num_tokens, d_in)         z^(i) = Σ_j α_ij x^(j)
//
// Not here: scaling by sqrt(d_k) and trainable projections (§3.4, self_attention.h), masks (§3.5).
#pragma once
#include "core/tensor.h"

namespace tg::nn {

// §3.3.1's inputs: "Your journey starts with one step" as six 3-d embeddings, one row per word
// (x^(1) = Your .. x^(6) = step), float32 as the notebook's torch.tensor makes them.
Tensor your_journey_inputs();

// §3.3.1 step 1, the notebook's loop: attn_scores_2[i] = torch.dot(x_i, query).
// inputs (num_tokens, d_in), query (d_in) -> (num_tokens)
Tensor attention_scores_for_query(const Tensor& inputs, const Tensor& query);

// §3.3.1 step 2: exp(x) / exp(x).sum(dim=0), the notebook's softmax_naive. Overflows for large
// scores (exp(89) is inf in float32), hence:
Tensor softmax_naive(const Tensor& x);
// The stable form torch.softmax uses: exp(x - max) / Σ exp(x - max) along `dim`; equal to
// softmax_naive wherever that does not overflow. (tg::softmax is the fused op with its own
// backward; this composition shows the idea and is checked against it.)
Tensor softmax_stable(const Tensor& x, int64_t dim);

// §3.3.1 step 3, the notebook's loop: context_vec_2 += attn_weights_2[i] * x_i.
// attn_weights (num_tokens), inputs (num_tokens, d_in) -> (d_in)
Tensor context_vector_loop(const Tensor& attn_weights, const Tensor& inputs);

// §3.3.2, the notebook's double loop: attn_scores[i, j] = torch.dot(x_i, x_j).
Tensor attention_scores_loop(const Tensor& inputs);

// §3.3.2 in matrix form: softmax(inputs @ inputs.T, dim=-1) @ inputs.
// inputs (num_tokens, d_in) -> all_context_vecs (num_tokens, d_in)
Tensor simple_self_attention(const Tensor& inputs);

}  // namespace tg::nn
