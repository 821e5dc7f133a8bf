#include "nn/mha_combined_qkv.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "core/ops.h"
#include "nn/attention_checks.h"
#include "nn/causal_mask.h"

namespace tg::nn {

namespace {
constexpr const char* kName = "MultiHeadAttentionCombinedQKV";
}

MultiHeadAttentionCombinedQKV::MultiHeadAttentionCombinedQKV(int64_t d_in, int64_t d_out,
                                                             int64_t num_heads,
                                                             int64_t context_length, double dropout,
                                                             bool qkv_bias, Generator* gen)
    : Module(kName),
      num_heads(num_heads),
      context_length(detail::checked_context_length(kName, context_length)),
      head_dim(
          detail::checked_head_dim(kName, d_out, num_heads, "d_out is indivisible by num_heads")),
      d_out(d_out) {
  register_module("qkv", &qkv, std::make_shared<Linear>(d_in, 3 * d_out, qkv_bias, gen));
  register_module("proj", &proj, std::make_shared<Linear>(d_out, d_out, true, gen));
  register_module("dropout", &this->dropout, std::make_shared<Dropout>(dropout, gen));
  register_buffer("mask", &mask, causal_mask(context_length));
}

Tensor MultiHeadAttentionCombinedQKV::forward(const Tensor& x) {
  detail::check_attention_input(kName, x, 3, qkv->in_features, context_length);
  const int64_t batch_size = x.size(0), num_tokens = x.size(1), embed_dim = x.size(2);
  if (embed_dim != d_out) {  // where PyTorch's last view fails, said up front
    std::ostringstream os;
    os << kName << ": input of shape " << shape_str(x.shape()) << " has embed_dim = " << embed_dim
       << ", but the notebook's forward views its (b, num_tokens, d_out = " << d_out
       << ") context as (b, num_tokens, embed_dim), so d_in must equal d_out (PyTorch: shape '["
       << batch_size << ", " << num_tokens << ", " << embed_dim
       << "]' is invalid for input of size " << batch_size * num_tokens * d_out << ")";
    throw std::invalid_argument(os.str());
  }

  // (b, num_tokens, embed_dim) --> (b, num_tokens, 3 * embed_dim)
  Tensor qkv_out = (*qkv)(x);
  // (b, num_tokens, 3 * embed_dim) --> (b, num_tokens, 3, num_heads, head_dim)
  qkv_out = qkv_out.view({batch_size, num_tokens, 3, num_heads, head_dim});
  // (b, num_tokens, 3, num_heads, head_dim) --> (3, b, num_heads, num_tokens, head_dim)
  qkv_out = qkv_out.permute({2, 0, 3, 1, 4});
  // qkv.unbind(0): 3 times (b, num_heads, num_tokens, head_dim)
  const Tensor queries = qkv_out.select(0, 0), keys = qkv_out.select(0, 1),
               values = qkv_out.select(0, 2);

  // (b, num_heads, num_tokens, head_dim) --> (b, num_heads, num_tokens, num_tokens)
  Tensor attn_scores = matmul(queries, keys.transpose(-2, -1));
  const Tensor mask_bool = mask.to(DType::Bool).slice(0, 0, num_tokens).slice(1, 0, num_tokens);
  attn_scores = attn_scores.masked_fill(mask_bool, -std::numeric_limits<double>::infinity());

  Tensor attn_weights = softmax(attn_scores / std::pow(double(keys.size(-1)), 0.5), -1);
  attn_weights = (*dropout)(attn_weights);

  // (b, num_heads, num_tokens, num_tokens) --> (b, num_heads, num_tokens, head_dim)
  Tensor context_vec = matmul(attn_weights, values);
  // (b, num_heads, num_tokens, head_dim) --> (b, num_tokens, num_heads, head_dim)
  context_vec = context_vec.transpose(1, 2);
  // (b, num_tokens, num_heads, head_dim) --> (b, num_tokens, embed_dim)
  context_vec = context_vec.contiguous().view({batch_size, num_tokens, embed_dim});
  return (*proj)(context_vec);
}

}  // namespace tg::nn
