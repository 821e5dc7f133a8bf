#include "nn/self_attention.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "nn/attention_checks.h"

namespace tg::nn {

SelfAttention_v1::SelfAttention_v1(int64_t d_in, int64_t d_out, Generator* gen)
    : Module("SelfAttention_v1"), d_in(d_in), d_out(d_out) {
  // Three torch.rand(d_in, d_out) calls in the book's order: same seed, same matrices.
  register_parameter("W_query", &W_query, rand({d_in, d_out}, gen));
  register_parameter("W_key", &W_key, rand({d_in, d_out}, gen));
  register_parameter("W_value", &W_value, rand({d_in, d_out}, gen));
}

Tensor SelfAttention_v1::forward(const Tensor& x) {
  detail::check_attention_input("SelfAttention_v1", x, 2, d_in);
  const Tensor keys = matmul(x, W_key);  // (num_tokens, d_out)
  const Tensor queries = matmul(x, W_query);
  const Tensor values = matmul(x, W_value);
  const Tensor attn_scores = matmul(queries, keys.T());  // omega, (num_tokens, num_tokens)
  const Tensor attn_weights = softmax(attn_scores / std::pow(double(keys.size(-1)), 0.5), -1);
  const Tensor context_vec = matmul(attn_weights, values);  // (num_tokens, d_out)
  return context_vec;
}

SelfAttention_v2::SelfAttention_v2(int64_t d_in, int64_t d_out, bool qkv_bias, Generator* gen)
    : Module("SelfAttention_v2"), d_in(d_in), d_out(d_out) {
  // Built (and so drawn) in the book's order: W_query, W_key, W_value.
  register_module("W_query", &W_query, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
  register_module("W_key", &W_key, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
  register_module("W_value", &W_value, std::make_shared<Linear>(d_in, d_out, qkv_bias, gen));
}

Tensor SelfAttention_v2::forward(const Tensor& x) {
  detail::check_attention_input("SelfAttention_v2", x, 2, d_in);
  const Tensor keys = (*W_key)(x);  // (num_tokens, d_out)
  const Tensor queries = (*W_query)(x);
  const Tensor values = (*W_value)(x);
  const Tensor attn_scores = matmul(queries, keys.T());  // (num_tokens, num_tokens)
  const Tensor attn_weights = softmax(attn_scores / std::pow(double(keys.size(-1)), 0.5), -1);
  const Tensor context_vec = matmul(attn_weights, values);  // (num_tokens, d_out)
  return context_vec;
}

}  // namespace tg::nn
