#include "nn/linear.h"

#include <stdexcept>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/rng.h"

namespace tg::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Generator* gen)
    : Module("Linear"), in_features(in_features), out_features(out_features) {
  if (in_features < 0 || out_features < 0)
    throw std::invalid_argument("Linear: in_features and out_features must be >= 0, got (" +
                                std::to_string(in_features) + ", " + std::to_string(out_features) +
                                ")");
  checked_nbytes({out_features, in_features}, DType::Float32, "Linear");
  NoGradGuard no_grad;  // nn.init runs under torch.no_grad()
  Tensor w = empty({out_features, in_features});
  // The bound is computed in Python's double order (rng.h), which can sit 1 ulp below 1/sqrt(in).
  const double wb = linear_init_bound(in_features);
  uniform_(w, -wb, wb, gen);
  register_parameter("weight", &weight, w);
  if (bias) {
    Tensor b = empty({out_features});
    const double bb = linear_bias_bound(in_features);
    uniform_(b, -bb, bb, gen);
    register_parameter("bias", &this->bias, b);
  }
}

Tensor Linear::forward(const Tensor& x) {
  if (x.dim() < 1 || x.size(-1) != in_features)
    throw std::invalid_argument("Linear(in_features=" + std::to_string(in_features) +
                                ", out_features=" + std::to_string(out_features) +
                                "): expected input (*, " + std::to_string(in_features) + "), got " +
                                shape_str(x.shape()));
  return linear(x, weight, bias);
}

}  // namespace tg::nn
