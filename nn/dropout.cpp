#include "nn/dropout.h"

#include <stdexcept>
#include <string>

#include "core/ops.h"

namespace tg::nn {

Dropout::Dropout(double p, Generator* gen) : Module("Dropout"), p(p), gen(gen) {
  if (!(p >= 0 && p <= 1))
    throw std::invalid_argument("Dropout: probability has to be between 0 and 1, but got " +
                                std::to_string(p));
}

Tensor Dropout::forward(const Tensor& x) { return tg::dropout(x, p, is_training(), gen); }

}  // namespace tg::nn
