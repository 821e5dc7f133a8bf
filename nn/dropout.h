// nn::Dropout: torch.nn.Dropout (§3.5.2, dropout on the attention weights).
//
// In training mode forward(x) is F.dropout(x, p): keep each element with probability 1-p and
// scale it by 1/(1-p), the mask drawn from the generator exactly as PyTorch 1.13 draws it
// (docs/torch_rng.md §4). In eval mode, and for p == 0, it returns x itself and draws nothing.
//
// Not here: inplace=True, Dropout1d/2d/AlphaDropout.
#pragma once
#include "nn/module.h"

namespace tg {
class Generator;
}

namespace tg::nn {

class Dropout : public Module {
 public:
  // Throws std::invalid_argument, quoting p, unless 0 <= p <= 1.
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;

  double p;
  Generator* gen;  // null: the global generator (torch.manual_seed)
};

}  // namespace tg::nn
