#include "nn/simple_attention.h"

#include <stdexcept>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"

namespace tg::nn {

namespace {
void check_inputs(const char* fn, const Tensor& inputs) {
  if (!inputs.defined() || inputs.dim() != 2)
    throw std::invalid_argument(std::string(fn) + ": expected inputs (num_tokens, d_in), got " +
                                (inputs.defined() ? shape_str(inputs.shape()) : "undefined"));
}
}  // namespace

Tensor your_journey_inputs() {
  return tensor({{0.43, 0.15, 0.89},    // Your     (x^1)
                 {0.55, 0.87, 0.66},    // journey  (x^2)
                 {0.57, 0.85, 0.64},    // starts   (x^3)
                 {0.22, 0.58, 0.33},    // with     (x^4)
                 {0.77, 0.25, 0.10},    // one      (x^5)
                 {0.05, 0.80, 0.55}});  // step     (x^6)
}

Tensor attention_scores_for_query(const Tensor& inputs, const Tensor& query) {
  check_inputs("attention_scores_for_query", inputs);
  if (query.dim() != 1 || query.size(0) != inputs.size(1))
    throw std::invalid_argument("attention_scores_for_query: query " + shape_str(query.shape()) +
                                " must be a (d_in) vector for inputs " + shape_str(inputs.shape()));
  Tensor attn_scores_2 = empty({inputs.size(0)}, inputs.dtype());
  NoGradGuard no_grad;  // element writes into a fresh tensor, as the notebook's loop does
  for (int64_t i = 0; i < inputs.size(0); ++i) attn_scores_2[i].copy_(matmul(inputs[i], query));
  return attn_scores_2;
}

Tensor softmax_naive(const Tensor& x) { return exp(x) / exp(x).sum(0); }

Tensor softmax_stable(const Tensor& x, int64_t dim) {
  // Subtracting the row max makes every exponent <= 0, so nothing overflows; the max itself needs
  // no gradient (the result does not depend on it), as in tinygrad's _softmax.
  const Tensor m = x.max(dim, /*keepdim=*/true).first.detach();
  const Tensor e = exp(x - m);
  return e / e.sum(dim, /*keepdim=*/true);
}

Tensor context_vector_loop(const Tensor& attn_weights, const Tensor& inputs) {
  check_inputs("context_vector_loop", inputs);
  if (attn_weights.dim() != 1 || attn_weights.size(0) != inputs.size(0))
    throw std::invalid_argument(
        "context_vector_loop: attn_weights " + shape_str(attn_weights.shape()) +
        " must hold one weight per row of inputs " + shape_str(inputs.shape()));
  Tensor context_vec = zeros({inputs.size(1)}, inputs.dtype());
  for (int64_t i = 0; i < inputs.size(0); ++i)
    context_vec = context_vec + attn_weights[i] * inputs[i];
  return context_vec;
}

Tensor attention_scores_loop(const Tensor& inputs) {
  check_inputs("attention_scores_loop", inputs);
  const int64_t n = inputs.size(0);
  Tensor attn_scores = empty({n, n}, inputs.dtype());
  NoGradGuard no_grad;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) attn_scores[i][j].copy_(matmul(inputs[i], inputs[j]));
  return attn_scores;
}

Tensor simple_self_attention(const Tensor& inputs) {
  check_inputs("simple_self_attention", inputs);
  const Tensor attn_scores = matmul(inputs, inputs.T());  // (num_tokens, num_tokens)
  const Tensor attn_weights = softmax(attn_scores, -1);   // rows sum to 1
  return matmul(attn_weights, inputs);                    // (num_tokens, d_in)
}

}  // namespace tg::nn
