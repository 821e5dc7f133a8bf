// nn::GELU: the book's GELU module (§4.3), the tanh approximation
//   0.5 · x · (1 + tanh(sqrt(2/π) · (x + 0.044715 · x³))), computed by tg::gelu.
#pragma once
#include "nn/module.h"

namespace tg::nn {

class GELU : public Module {
 public:
  GELU() : Module("GELU") {}
  Tensor forward(const Tensor& x) override;
};

}  // namespace tg::nn
