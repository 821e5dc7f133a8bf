#include "nn/layer_norm.h"

#include <stdexcept>
#include <string>

#include "core/ops.h"

namespace tg::nn {

LayerNorm::LayerNorm(int64_t emb_dim) : Module("LayerNorm"), emb_dim(emb_dim) {
  // ones and zeros: no random draws (TORCH_RNG.md §8)
  register_parameter("scale", &scale, ones({emb_dim}));
  register_parameter("shift", &shift, zeros({emb_dim}));
}

Tensor LayerNorm::forward(const Tensor& x) {
  if (x.dim() < 1 || x.size(-1) != emb_dim)
    throw std::invalid_argument("LayerNorm(" + std::to_string(emb_dim) + "): expected input (*, " +
                                std::to_string(emb_dim) + "), got " + shape_str(x.shape()));
  const Tensor mean = x.mean(-1, /*keepdim=*/true);
  const Tensor var = x.var(-1, /*unbiased=*/false, /*keepdim=*/true);
  const Tensor norm_x = (x - mean) / (var + eps).sqrt();
  return scale * norm_x + shift;
}

}  // namespace tg::nn
