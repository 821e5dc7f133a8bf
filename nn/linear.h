// nn::Linear: y = x·Wᵀ + b, torch.nn.Linear (used from §3.4.2 on: SelfAttention_v2's W_query).
//
// weight is stored (out_features, in_features), as torch and llm.c store it, so state_dicts need
// no transpose. The constructor draws PyTorch's default initialisation from the generator, in
// PyTorch's order (docs/torch_rng.md §8): the weight, row-major, from kaiming_uniform_(a=sqrt(5)),
// then the bias from U(-1/sqrt(in), 1/sqrt(in)). Same seed, same weights as torch.
//
// Not here: device/dtype arguments (call to(DType) afterwards), lazy shapes.
#pragma once
#include "nn/module.h"

namespace tg {
class Generator;
}

namespace tg::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);

  // x: (*, in_features) -> (*, out_features)
  Tensor forward(const Tensor& x) override;

  int64_t in_features, out_features;
  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features), undefined when bias=false
};

}  // namespace tg::nn
