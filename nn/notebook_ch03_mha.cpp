#include "nn/notebook_ch03_mha.h"

namespace tg::nn {

Ch03_MHA_Wrapper::Ch03_MHA_Wrapper(int64_t d_in, int64_t d_out, int64_t context_length,
                                   double dropout, int64_t num_heads, bool qkv_bias, Generator* gen)
    : MultiHeadAttentionWrapper("Ch03_MHA_Wrapper", d_in, d_out, context_length, dropout, num_heads,
                                qkv_bias, gen) {
  // After every head, as in the notebook's __init__: the heads draw first.
  register_module("out_proj", &out_proj,
                  std::make_shared<Linear>(d_out * num_heads, d_out * num_heads, true, gen));
}

Tensor Ch03_MHA_Wrapper::forward(const Tensor& x) {
  // The chapter's wrapper: the heads side by side, (b, num_tokens, num_heads * d_out)
  const Tensor context_vec = MultiHeadAttentionWrapper::forward(x);
  return (*out_proj)(context_vec);
}

}  // namespace tg::nn
