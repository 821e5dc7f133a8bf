#include "nn/layer_norm.h"

#include <stdexcept>
#include <string>

#include "core/ops.h"

namespace tg::nn {

LayerNorm::LayerNorm(int64_t emb_dim) : Module("LayerNorm"), emb_dim(emb_dim) {
  // ones and zeros: no random draws (docs/torch_rng.md §8)
  register_parameter("scale", &scale, ones({emb_dim}));
  register_parameter("shift", &shift, zeros({emb_dim}));
}

Tensor LayerNorm::forward(const Tensor& x) {
  if (x.dim() < 1 || x.size(-1) != emb_dim)
    throw std::invalid_argument("LayerNorm(" + std::to_string(emb_dim) + "): expected input (*, " +
                                std::to_string(emb_dim) + "), got " + shape_str(x.shape()));
  // The book's forward, which the layer_norm op computes in one pass (core/ops/layer_norm.cpp):
  //   mean = x.mean(dim=-1, keepdim=True)
  //   var = x.var(dim=-1, keepdim=True, unbiased=False)
  //   norm_x = (x - mean) / torch.sqrt(var + self.eps)
  //   return self.scale * norm_x + self.shift
  return layer_norm(x, scale, shift, eps);
}

}  // namespace tg::nn
