// nn::LayerNorm: the book's own LayerNorm (§4.2, ch04 `LayerNorm(emb_dim)`), which the GPT block
// uses after chapter 3: (x - mean) / sqrt(var + eps) * scale + shift over the last dim, with the
// biased variance (unbiased=False) and eps = 1e-5. Parameters are named `scale` and `shift`, as in
// the book (not torch.nn.LayerNorm's weight/bias), so the book's state_dict names match.
//
// Not here: normalising over more than the last dim, elementwise_affine=False.
#pragma once
#include "nn/module.h"

namespace tg::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t emb_dim);
  // x: (*, emb_dim) -> same shape
  Tensor forward(const Tensor& x) override;

  int64_t emb_dim;
  double eps = 1e-5;
  Tensor scale;  // ones(emb_dim)
  Tensor shift;  // zeros(emb_dim)
};

}  // namespace tg::nn
