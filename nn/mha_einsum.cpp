#include "nn/mha_einsum.h"

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/rng.h"
#include "nn/attention_checks.h"
#include "nn/causal_mask.h"

namespace tg::nn {

MHAEinsum::MHAEinsum(int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                     int64_t num_heads, bool qkv_bias, Generator* gen)
    : Module("MHAEinsum"),
      d_in(d_in),
      d_out(d_out),
      context_length(detail::checked_context_length("MHAEinsum", context_length)),
      num_heads(num_heads),
      head_dim(detail::checked_head_dim("MHAEinsum", d_out, num_heads)),
      gen(gen) {
  register_parameter("W_query", &W_query, randn({d_in, d_out}, gen));
  register_parameter("W_key", &W_key, randn({d_in, d_out}, gen));
  register_parameter("W_value", &W_value, randn({d_in, d_out}, gen));
  if (qkv_bias) {
    register_parameter("bias_q", &bias_q, zeros({d_out}));
    register_parameter("bias_k", &bias_k, zeros({d_out}));
    register_parameter("bias_v", &bias_v, zeros({d_out}));
  }
  register_module("out_proj", &out_proj, std::make_shared<Linear>(d_out, d_out, true, gen));
  register_module("dropout", &this->dropout, std::make_shared<Dropout>(dropout, gen));
  register_buffer("mask", &mask, causal_mask(context_length));
  reset_parameters();
}

void MHAEinsum::reset_parameters() {
  NoGradGuard no_grad;  // nn.init runs under torch.no_grad()
  // kaiming_uniform_(a=sqrt(5)) on a (d_in, d_out) weight: fan_in is size(1), as for a Linear
  // of in_features d_out, so Linear's bounds in Python's double order serve.
  const double wb = linear_init_bound(d_out);
  for (Tensor* w : {&W_query, &W_key, &W_value}) uniform_(*w, -wb, wb, gen);
  if (!bias_q.defined()) return;
  const double bb = linear_bias_bound(d_out);  // 1 / sqrt(fan_in)
  for (Tensor* b : {&bias_q, &bias_k, &bias_v}) uniform_(*b, -bb, bb, gen);
}

Tensor MHAEinsum::forward(const Tensor& x) {
  detail::check_attention_input("MHAEinsum", x, 3, d_in, context_length);
  const int64_t b = x.size(0), n = x.size(1);

  // Calculate Q, K, V using einsum, first perform linear transformations
  Tensor Q = einsum("bnd,do->bno", {x, W_query});
  Tensor K = einsum("bnd,do->bno", {x, W_key});
  Tensor V = einsum("bnd,do->bno", {x, W_value});

  // Add biases if they are used
  if (bias_q.defined()) {
    Q = Q + bias_q;
    K = K + bias_k;
    V = V + bias_v;
  }

  // Reshape for multi-head attention: (b, num_heads, n, head_dim)
  Q = Q.view({b, n, num_heads, head_dim}).transpose(1, 2);
  K = K.view({b, n, num_heads, head_dim}).transpose(1, 2);
  V = V.view({b, n, num_heads, head_dim}).transpose(1, 2);

  // Scaled dot-product attention
  Tensor scores = einsum("bhnd,bhmd->bhnm", {Q, K}) / std::pow(double(head_dim), 0.5);

  // Apply mask
  const Tensor mask_bool = mask.slice(0, 0, n).slice(1, 0, n).to(DType::Bool);
  scores = scores.masked_fill(mask_bool, -std::numeric_limits<double>::infinity());

  // Softmax and dropout
  Tensor attn_weights = softmax(scores, -1);
  attn_weights = (*dropout)(attn_weights);

  // Aggregate the attended context vectors
  Tensor context_vec = einsum("bhnm,bhmd->bhnd", {attn_weights, V});

  // Combine heads and project the output
  context_vec = context_vec.transpose(1, 2).reshape({b, n, d_out});
  return (*out_proj)(context_vec);
}

}  // namespace tg::nn
