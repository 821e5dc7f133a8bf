// Helpers shared by the op files: the tensor layer's (core/tensor_detail.h: errors naming the op,
// dim wrapping, dtype dispatch, broadcasting, the strided loop, conversion copies) and type
// promotion.
#pragma once
#include "core/tensor_detail.h"

namespace tg::detail {

// PyTorch's promotion for two tensors: float64 > float32 > int64 > bool.
DType promote(DType a, DType b);

}  // namespace tg::detail
