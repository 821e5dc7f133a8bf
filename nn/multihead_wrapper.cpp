#include "nn/multihead_wrapper.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "core/ops.h"
#include "nn/attention_checks.h"

namespace tg::nn {

MultiHeadAttentionWrapper::MultiHeadAttentionWrapper(const char* name, int64_t d_in, int64_t d_out,
                                                     int64_t context_length, double dropout,
                                                     int64_t num_heads, bool qkv_bias,
                                                     Generator* gen)
    : Module(name),
      d_in(d_in),
      d_out(d_out),
      context_length(detail::checked_context_length(name, context_length)),
      num_heads(num_heads) {
  if (num_heads < 1)
    throw std::invalid_argument(std::string(name) + ": num_heads must be >= 1, got " +
                                std::to_string(num_heads));
  register_module("heads", &heads, std::make_shared<ModuleList>());
  for (int64_t h = 0; h < num_heads; ++h)
    heads->append(
        std::make_shared<CausalAttention>(d_in, d_out, context_length, dropout, qkv_bias, gen));
}

Tensor MultiHeadAttentionWrapper::forward(const Tensor& x) {
  detail::check_attention_input(type_name().c_str(), x, 3, d_in, context_length);
  std::vector<Tensor> outs;
  for (const auto& h : *heads) outs.push_back((*h)(x));  // each (b, num_tokens, d_out)
  return cat(outs, -1);                                  // (b, num_tokens, num_heads * d_out)
}

}  // namespace tg::nn
