// Printing tensors exactly as PyTorch does: tensor([[0.4421, 0.5931, 0.5790], ...]).
// Kept independent of Tensor (only its DType, core/dtype.h): the caller flattens the values in
// row-major (logical) order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tg {

struct PrintOptions {  // torch.set_printoptions defaults
  int precision = 4;
  int64_t threshold = 1000;
  int64_t edgeitems = 3;
  int64_t linewidth = 80;
};

struct PrintInput {
  std::vector<int64_t> shape;  // {} for a 0-d tensor
  DType dtype = DType::Float32;
  std::vector<double> f;       // values when dtype is Float32/Float64 (float32 widened exactly)
  std::vector<int64_t> i;      // values when dtype is Int64/Bool (Bool: 0 or 1)
  std::string grad_fn;         // e.g. "MmBackward0"; empty when not on the tape
  bool requires_grad = false;  // a leaf that requires grad prints requires_grad=True
};

// The full repr, e.g. "tensor([1., 2.], dtype=torch.float64, requires_grad=True)".
// Throws std::invalid_argument (message starts "format_tensor: shape [..]") for a negative dim, a
// value count that does not match the shape, a Bool value other than 0/1, or precision < 0 or
// edgeitems < 1.
std::string format_tensor(const PrintInput& in, const PrintOptions& opt = {});

}  // namespace tg
