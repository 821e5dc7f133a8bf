#include "nn/embedding.h"

#include <stdexcept>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"

namespace tg::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator* gen)
    : Module("Embedding"), num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  if (num_embeddings < 0 || embedding_dim < 0)
    throw std::invalid_argument("Embedding: sizes must be >= 0, got (" +
                                std::to_string(num_embeddings) + ", " +
                                std::to_string(embedding_dim) + ")");
  checked_nbytes({num_embeddings, embedding_dim}, DType::Float32, "Embedding");
  NoGradGuard no_grad;
  Tensor w = empty({num_embeddings, embedding_dim});
  normal_(w, 0, 1, gen);
  register_parameter("weight", &weight, w);
}

Tensor Embedding::forward(const Tensor& ids) {
  if (ids.dtype() != DType::Int64)
    throw std::invalid_argument(std::string("Embedding: expected int64 token ids, got ") +
                                dtype_name(ids.dtype()) + " " + shape_str(ids.shape()));
  return embedding(ids, weight);
}

}  // namespace tg::nn
