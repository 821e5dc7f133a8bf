#include "nn/gelu.h"

#include "core/ops.h"

namespace tg::nn {

Tensor GELU::forward(const Tensor& x) { return gelu(x); }

}  // namespace tg::nn
