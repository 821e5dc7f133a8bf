// nn::Embedding: torch.nn.Embedding (chapter 2's token and position embeddings, used by the
// multi-head attention notebook to build its inputs).
//
// weight (num_embeddings, embedding_dim) is drawn by normal_(0, 1) in PyTorch's order
// (docs/torch_rng.md §3 and §8: the vectorised path for 16 or more elements, the scalar Box-Muller
// path below).
//
// Not here: padding_idx, max_norm, sparse gradients.
#pragma once
#include "nn/module.h"

namespace tg {
class Generator;
}

namespace tg::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator* gen = nullptr);
  // ids: int64 of any shape -> ids.shape + (embedding_dim)
  Tensor forward(const Tensor& ids) override;

  int64_t num_embeddings, embedding_dim;
  Tensor weight;
};

}  // namespace tg::nn
